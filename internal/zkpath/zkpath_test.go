package zkpath

import (
	"slices"
	"strings"
	"testing"
)

func TestPaths(t *testing.T) {
	r := Root("/meta/")
	for got, want := range map[string]string{
		Root(""):                              "/meta",
		Root("/"):                             "",
		Brokers(r):                            "/meta/brokers",
		BrokerIDs(r):                          "/meta/brokers/ids",
		Broker(r, 3):                          "/meta/brokers/ids/3",
		Master(r, 3):                          "/meta/brokers/ids/3/master",
		MasterTLS(r, 3):                       "/meta/brokers/ids/3/master_tls",
		MasterChecksum(r, 3):                  "/meta/brokers/ids/3/master_config_checksum",
		Slave(r, 3, 1):                        "/meta/brokers/ids/3/slave1",
		Topics.Topic(r, "t"):                  "/meta/brokers/topics/t",
		TopicsPub.Dir(r):                      "/meta/brokers/topics-pub",
		TopicsSub.Node(r, "t", MasterName(3)): "/meta/brokers/topics-sub/t/3-m",
		TopicsSub.Node(r, "t", BrokerName{ID: 3, Slave: 2}): "/meta/brokers/topics-sub/t/3-s2",
		Consumers(r):                                          "/meta/consumers",
		Member(r, "g", ConsumerID("g", "a")):                  "/meta/consumers/g/ids/g_a",
		Owner(r, "g", "t", 1, 7):                              "/meta/consumers/g/owners/t/1-7",
		Offset(r, "g", "t", 12, 0):                            "/meta/consumers/g/offsets/t/12-0",
		Offsets(Root("/"), "g"):                               "/consumers/g/offsets",
		string(TopicData{NumParts: 4, Broker: "1-m"}.Bytes()): `{"numParts":4,"broker":"1-m"}`,
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "1", "1-", "-m", "01-m", "+1-m", "1-x", "1-s", "1-s01", "1-s-1", "1-m ", "99999999999-m"} {
		if b, err := ParseBrokerName(s); err == nil {
			t.Errorf("ParseBrokerName(%q) = %v, want an error", s, b)
		}
	}
	for _, s := range []string{"", "1", "1-", "-1", "01-2", "1-02", "1--2", "1-2-3", " 1-2", "1-2147483648"} {
		if b, p, err := ParsePartitionName(s); err == nil {
			t.Errorf("ParsePartitionName(%q) = %d, %d, want an error", s, b, p)
		}
	}
	for _, s := range []string{"", "x", `{"numParts":-1}`, `{"numParts":"4"}`} {
		if d, err := ParseTopicData([]byte(s)); err == nil {
			t.Errorf("ParseTopicData(%q) = %+v, want an error", s, d)
		}
	}
	for _, s := range []string{"g", "g_", "h_a", "ga"} {
		if id, err := ParseConsumerID("g", s); err == nil {
			t.Errorf("ParseConsumerID(g, %q) = %q, want an error", s, id)
		}
	}
	if id, err := ParseConsumerID("a_b", "a_b_c_d"); err != nil || id != "c_d" {
		t.Errorf("ParseConsumerID(a_b, a_b_c_d) = %q, %v", id, err)
	}
	if got := ParseMemberData([]byte(" t, u,,t ,")); !slices.Equal(got, []string{"t", "u"}) {
		t.Errorf("ParseMemberData = %q", got)
	}
}

// FuzzParseBrokerName checks that every name ParseBrokerName accepts is
// written back unchanged, and that the names it writes parse.
func FuzzParseBrokerName(f *testing.F) {
	for _, s := range []string{"0-m", "1-m", "12-s0", "3-s10", "01-m", "1-s", "-m", "1-m-", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBrokerName(s)
		if err != nil {
			return
		}
		if b.ID < 0 || b.Slave < -1 {
			t.Fatalf("ParseBrokerName(%q) = %+v: negative", s, b)
		}
		if got := b.String(); got != s {
			t.Fatalf("ParseBrokerName(%q).String() = %q", s, got)
		}
	})
}

// FuzzParsePartitionName checks the round trip of partition names.
func FuzzParsePartitionName(f *testing.F) {
	for _, s := range []string{"0-0", "1-7", "12-100", "2147483647-2147483647", "01-1", "1-", "-1-2", "a-b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, p, err := ParsePartitionName(s)
		if err != nil {
			return
		}
		if b < 0 || p < 0 {
			t.Fatalf("ParsePartitionName(%q) = %d, %d: negative", s, b, p)
		}
		if got := PartitionName(b, p); got != s {
			t.Fatalf("PartitionName(ParsePartitionName(%q)) = %q", s, got)
		}
	})
}

// FuzzParseTopicData checks that accepted data encodes and parses back to
// the same value.
func FuzzParseTopicData(f *testing.F) {
	for _, s := range []string{`{"numParts":4,"broker":"1-m"}`, `{"numParts":0}`, `{"numParts":-1}`, `{}`, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseTopicData(b)
		if err != nil {
			return
		}
		back, err := ParseTopicData(d.Bytes())
		if err != nil || back != d {
			t.Fatalf("ParseTopicData(%q) = %+v; its bytes %q parse to %+v, %v", b, d, d.Bytes(), back, err)
		}
	})
}

// FuzzParseConsumerID checks ConsumerID and ParseConsumerID invert each
// other.
func FuzzParseConsumerID(f *testing.F) {
	f.Add("g", "g_a")
	f.Add("a_b", "a_b_c")
	f.Add("g", "h_a")
	f.Fuzz(func(t *testing.T, group, cid string) {
		id, err := ParseConsumerID(group, cid)
		if err != nil {
			return
		}
		if id == "" || ConsumerID(group, id) != cid {
			t.Fatalf("ParseConsumerID(%q, %q) = %q", group, cid, id)
		}
	})
}

// FuzzParseMemberData checks that member data written from parsed topics
// parses to the same topics.
func FuzzParseMemberData(f *testing.F) {
	for _, s := range []string{"t", "t,u", " t , u ,", ",,", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ts := ParseMemberData(b)
		for _, s := range ts {
			if s == "" || strings.Contains(s, ",") {
				t.Fatalf("ParseMemberData(%q) = %q", b, ts)
			}
		}
		if back := ParseMemberData(MemberData(ts)); !slices.Equal(back, ts) {
			t.Fatalf("ParseMemberData(%q) = %q, written back %q", b, ts, back)
		}
	})
}

func TestEpochData(t *testing.T) {
	for _, c := range []struct {
		s    string
		want EpochData
	}{
		{"1 m -", EpochData{1, -1, -1}},
		{"3 s1 -", EpochData{3, 1, -1}},
		{"7 m s2", EpochData{7, -1, 2}},
		{" 9  s0   s1\n", EpochData{9, 0, 1}},
	} {
		got, err := ParseEpochData([]byte(c.s))
		if err != nil || got != c.want {
			t.Errorf("ParseEpochData(%q) = %+v, %v; want %+v", c.s, got, err, c.want)
		}
	}
	for _, s := range []string{"", "1", "1 m", "0 m -", "-1 m -", "1 x -", "1 m m", "1 - -", "1 s01 -", "1 s1024 -", "1 m - x"} {
		if d, err := ParseEpochData([]byte(s)); err == nil {
			t.Errorf("ParseEpochData(%q) = %+v, want an error", s, d)
		}
	}
}

// FuzzParseEpochData checks that accepted epoch data encodes and parses
// back to the same value.
func FuzzParseEpochData(f *testing.F) {
	for _, s := range []string{"1 m -", "3 s1 -", "7 m s2", "0 m -", "1 s01 -", "", "9223372036854775807 s1023 s0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseEpochData(b)
		if err != nil {
			return
		}
		back, err := ParseEpochData(d.Bytes())
		if err != nil || back != d {
			t.Fatalf("ParseEpochData(%q) = %+v; its bytes %q parse to %+v, %v", b, d, d.Bytes(), back, err)
		}
	})
}

// FuzzParseOffsetData checks that accepted offset data parses back to the
// same values from OffsetData.
func FuzzParseOffsetData(f *testing.F) {
	for _, s := range []string{"5-100", "-1-0", "100", " 7-8\n", "1-", "-", "a-1", "1--2", "-5", "9223372036854775807-9223372036854775807", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		off, id, err := ParseOffsetData(b)
		if err != nil {
			return
		}
		if off < 0 {
			t.Fatalf("ParseOffsetData(%q) = offset %d", b, off)
		}
		off2, id2, err := ParseOffsetData(OffsetData(id, off))
		if err != nil || off2 != off || id2 != id {
			t.Fatalf("ParseOffsetData(%q) = %d, %d; OffsetData of it parses to %d, %d, %v", b, off, id, off2, id2, err)
		}
	})
}
