package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// splitAll cuts buf into records as the shipper does, final at the end.
func splitAll(s *recordSplitter, buf []byte, final, idle bool) (recs []string, rest int, splits int) {
	for {
		rec, n, split := s.next(buf, final, idle)
		if n == 0 {
			return recs, len(buf), splits
		}
		if split {
			splits++
		}
		recs = append(recs, string(rec))
		buf = buf[n:]
	}
}

func TestTailSplit(t *testing.T) {
	t.Parallel()
	lines := &recordSplitter{max: 8}
	for _, c := range []struct {
		in           string
		final, idle  bool
		want         []string
		rest, splits int
	}{
		{in: "a\nb\r\n\nc", want: []string{"a", "b", ""}, rest: 1},
		{in: "a\nb\r\n\nc", final: true, want: []string{"a", "b", "", "c"}},
		{in: "0123456789\nx\n", want: []string{"01234567", "89", "x"}, splits: 1},
		{in: "0123456789", want: []string{"01234567"}, rest: 2, splits: 1},
	} {
		recs, rest, splits := splitAll(lines, []byte(c.in), c.final, c.idle)
		if strings.Join(recs, "|") != strings.Join(c.want, "|") || rest != c.rest || splits != c.splits {
			t.Errorf("lines %q final=%v: got %q rest %d splits %d, want %q rest %d splits %d", c.in, c.final, recs, rest, splits, c.want, c.rest, c.splits)
		}
	}
	multi := &recordSplitter{start: regexp.MustCompile(`^\d`), max: 32}
	for _, c := range []struct {
		in           string
		final, idle  bool
		want         []string
		rest, splits int
	}{
		// A record ends when the next one's first line is complete.
		{in: "1 a\n  b\n  c\n2 d\n  e\n", want: []string{"1 a\n  b\n  c"}, rest: 8},
		{in: "1 a\n  b\n  c\n2 d\n  e\n", idle: true, want: []string{"1 a\n  b\n  c", "2 d\n  e"}},
		{in: "1 a\n  b\n2", want: nil, rest: 9},
		{in: "1 a\n  b\n2", idle: true, want: nil, rest: 9}, // is "2" a record's start? Wait for its line end.
		{in: "1 a\n  b\n2", final: true, want: []string{"1 a\n  b", "2"}},
		// Lines before the first start line form a record of their own.
		{in: "x\ny\n1 a\n2 b\n", want: []string{"x\ny", "1 a"}, rest: 4},
		{in: "1 a\r\n b\r\n2\r\n", idle: true, want: []string{"1 a\r\n b", "2"}},
		// A record within max followed by a partial line that takes buf
		// past max: wait for that line's end (it may begin the next
		// record), then cut nothing.
		{in: "1 " + strings.Repeat("x", 20) + "\n2 " + strings.Repeat("y", 20), want: nil, rest: 45},
		{in: "1 " + strings.Repeat("x", 20) + "\n2 " + strings.Repeat("y", 20) + "\n", idle: true, want: []string{"1 " + strings.Repeat("x", 20), "2 " + strings.Repeat("y", 20)}},
		// Longer than max: cut.
		{in: "1 " + strings.Repeat("x", 40) + "\n2\n", idle: true, want: []string{"1 " + strings.Repeat("x", 30), strings.Repeat("x", 10), "2"}, splits: 1},
		{in: "1\n" + strings.Repeat(" c\n", 20) + "2\n", idle: true, want: []string{("1\n" + strings.Repeat(" c\n", 20))[:32], (strings.Repeat(" c\n", 20))[30:59], "2"}, splits: 1},
	} {
		recs, rest, splits := splitAll(multi, []byte(c.in), c.final, c.idle)
		if strings.Join(recs, "|") != strings.Join(c.want, "|") || rest != c.rest || splits != c.splits {
			t.Errorf("multi %q final=%v idle=%v: got %q rest %d splits %d, want %q rest %d splits %d", c.in, c.final, c.idle, recs, rest, splits, c.want, c.rest, c.splits)
		}
	}
}

// FuzzTailSplit: the splitter consumes every byte exactly once in final
// mode, never returns a record over max, and a record is its input bytes
// with only line ends dropped.
func FuzzTailSplit(f *testing.F) {
	f.Add([]byte("a\nb\r\n\nc"), "", 8)
	f.Add([]byte("1 a\n  b\n  c\n2 d\n  e\n"), `^\d`, 32)
	f.Add([]byte("x\ny\n1 a\n2 b"), `^\d`, 3)
	f.Add([]byte(strings.Repeat("z", 100)), `^z`, 7)
	f.Fuzz(func(t *testing.T, in []byte, pat string, max int) {
		if max <= 0 || max > 1<<16 {
			return
		}
		s := &recordSplitter{max: max}
		if pat != "" {
			re, err := regexp.Compile(pat)
			if err != nil {
				return
			}
			s.start = re
		}
		for _, mode := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			buf := in
			total := 0
			for {
				rec, n, _ := s.next(buf, mode[0], mode[1])
				if n == 0 {
					break
				}
				if n > len(buf) || len(rec) > max || len(rec) > n {
					t.Fatalf("mode %v: record %d bytes, consumed %d of %d, max %d", mode, len(rec), n, len(buf), max)
				}
				if !bytes.HasPrefix(buf, rec) {
					t.Fatalf("mode %v: record %q is not the start of %q", mode, rec, buf)
				}
				if rest := buf[len(rec):n]; len(rest) > 2 || len(bytes.Trim(rest, "\r\n")) != 0 {
					t.Fatalf("mode %v: dropped %q after record %q", mode, rest, rec)
				}
				total += n
				buf = buf[n:]
			}
			if mode[0] && total != len(in) {
				t.Fatalf("final: consumed %d of %d bytes", total, len(in))
			}
		}
	})
}

// FuzzTailState: the state file parser never panics, and what it accepts
// saves and parses back the same.
func FuzzTailState(f *testing.F) {
	f.Add([]byte(`{"version":1,"topic":"t","files":[{"path":"/a","dev":1,"ino":2,"offset":3,"fpLen":3,"fpCrc":7}]}`))
	f.Add([]byte(`{"version":1,"files":[{"path":"/a","dev":1,"ino":2},{"path":"/b","dev":1,"ino":2}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1} x`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseTailState(b)
		if err != nil {
			return
		}
		p := t.TempDir() + "/s"
		if err := saveTailState(p, st); err != nil {
			t.Fatal(err)
		}
		st2, err := loadTailState(p)
		if err != nil {
			t.Fatalf("saved state does not load: %v", err)
		}
		if len(st2.Files) != len(st.Files) || st2.Topic != st.Topic {
			t.Fatalf("round trip: %+v vs %+v", st, st2)
		}
		for i := range st.Files {
			if st.Files[i] != st2.Files[i] {
				t.Fatalf("round trip: %+v vs %+v", st.Files[i], st2.Files[i])
			}
		}
	})
}
