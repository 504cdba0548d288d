package protocol

import "testing"

func TestParseCause(t *testing.T) {
	for _, tc := range []struct{ body, cause, msg string }{
		{WithCause(CausePartitionOutOfRange, "7 for topic t (0..3)"), CausePartitionOutOfRange, "7 for topic t (0..3)"},
		{CorruptDataPrefix + "store: partition t-0", CauseCorruptData, "store: partition t-0"},
		// Free text that mentions a partition, or a topic named after one,
		// has no cause.
		{"put to topic partition-events failed: disk error", "", "put to topic partition-events failed: disk error"},
		{"partition 3 is closed", "", "partition 3 is closed"},
		{"partition out of range", "", "partition out of range"},
		{"", "", ""},
	} {
		cause, msg := ParseCause(tc.body)
		if cause != tc.cause || msg != tc.msg {
			t.Errorf("ParseCause(%q) = %q, %q; want %q, %q", tc.body, cause, msg, tc.cause, tc.msg)
		}
	}
}
