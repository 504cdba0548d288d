package message

import "testing"

func TestPartitionString(t *testing.T) {
	for _, tc := range []struct {
		p    Partition
		want string
	}{
		{Partition{0, 0}, "0-0"},
		{Partition{1, 10}, "1-10"},
		{Partition{123, 2147483647}, "123-2147483647"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.p, got, tc.want)
		}
		back, err := ParsePartition(tc.want)
		if err != nil || back != tc.p {
			t.Errorf("ParsePartition(%q) = %v, %v; want %v", tc.want, back, err, tc.p)
		}
	}
}

func TestPartitionCompare(t *testing.T) {
	a, b, c := Partition{0, 5}, Partition{1, 0}, Partition{1, 2}
	if a.Compare(b) >= 0 || b.Compare(c) >= 0 || c.Compare(a) <= 0 || b.Compare(b) != 0 {
		t.Errorf("Compare does not order by (BrokerID, Partition)")
	}
}

func TestParsePartitionErrors(t *testing.T) {
	for _, s := range []string{
		"", "-", "0", "0-", "-0", "a-1", "1-b", "1-2-3", "-1-2", "1--2", "+1-2", "1-+2",
		"01-2", "1-02", " 1-2", "1-2 ", "1 -2", "1-2147483648", "1-99999999999",
		"99999999999999999999-1", "1_2", "0x1-2",
	} {
		if p, err := ParsePartition(s); err == nil {
			t.Errorf("ParsePartition(%q) = %v, want error", s, p)
		}
	}
}

func TestPositionString(t *testing.T) {
	p := Position{Topic: "t", Partition: Partition{2, 3}, Offset: 40, MsgID: 7}
	if got := p.String(); got != "t/2-3@40" {
		t.Errorf("String() = %q", got)
	}
}

func FuzzParsePartition(f *testing.F) {
	for _, s := range []string{"0-0", "1-10", "10-2", "123-2147483647", "1-2147483648",
		"01-2", "-1-2", "1--2", "a-b", "", "-", "1-2-3", "+1-2", "9223372036854775807-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePartition(s)
		if err != nil {
			return
		}
		if p.BrokerID < 0 || p.Partition < 0 {
			t.Fatalf("ParsePartition(%q) = %v: negative", s, p)
		}
		if got := p.String(); got != s {
			t.Fatalf("ParsePartition(%q).String() = %q", s, got)
		}
	})
}
