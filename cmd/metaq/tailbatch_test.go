package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTailBatchBytes: over long lines (400 KiB, as in the review that
// found a batch bounded by --batch's record count alone reaching 432 MB
// of RSS), every batch collect makes holds at most --batch-bytes of
// records, a record longer than that is a batch of its own, and every
// line of every file is collected once, in its file's order.
func TestTailBatchBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := strings.Repeat("b", 400<<10)
	var long strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&long, "%03d%s\n", i, big)
		if i%4 == 0 {
			fmt.Fprintf(&long, "short-%03d\n", i)
		}
	}
	paths := []string{filepath.Join(dir, "a-long.log"), filepath.Join(dir, "b-short.log")}
	if err := os.WriteFile(paths[0], []byte(long.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths[1], []byte(numbered("s-", 0, 3000)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		batch, batchBytes int
		start             *regexp.Regexp
	}{
		{4096, 8 << 20, nil},                        // the defaults
		{4096, 1 << 20, nil},                        // two long lines and then some
		{4096, 100 << 10, nil},                      // shorter than a long line: each alone
		{64, 8 << 20, regexp.MustCompile(`^\d{3}`)}, // --batch still bounds, multi-line records
	} {
		t.Run(fmt.Sprintf("batch%d-bytes%d", c.batch, c.batchBytes), func(t *testing.T) {
			var stderr bytes.Buffer
			tl := &tailer{e: &env{stderr: &stderr, timeout: 5 * time.Second},
				cfg:   tailConfig{topic: "logs", once: true, batch: c.batch, batchBytes: c.batchBytes, maxRecord: 512 << 10, recordWait: time.Second, keyFrom: "none"},
				split: recordSplitter{start: c.start, max: 512 << 10},
				files: map[string]*tailFile{}, resume: map[string]tailFileState{}, warned: map[string]bool{}, first: true}
			defer tl.closeFiles()
			for _, p := range paths {
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				fi, _ := f.Stat()
				if err := tl.open(f, p, "path:"+p, 0, 0, fi.Size(), false); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string][]string{}
			batches, most := 0, 0
			for round := 0; ; round++ {
				if round > 10000 {
					t.Fatal("collect does not drain the files")
				}
				batch := tl.collect()
				if len(batch) == 0 {
					if tl.drained() {
						break
					}
					continue
				}
				batches++
				n := 0
				for _, r := range batch {
					n += len(r.m.Body)
					got[r.tf.path] = append(got[r.tf.path], string(r.m.Body))
				}
				if len(batch) > c.batch || n > c.batchBytes && len(batch) > 1 {
					t.Fatalf("batch %d: %d records, %d bytes: over --batch %d or --batch-bytes %d", batches, len(batch), n, c.batch, c.batchBytes)
				}
				most = max(most, n)
			}
			want := map[string][]string{paths[0]: strings.Split(strings.TrimSuffix(long.String(), "\n"), "\n"),
				paths[1]: strings.Split(strings.TrimSuffix(numbered("s-", 0, 3000), "\n"), "\n")}
			if c.start != nil {
				// Every line of the short file is a continuation of the one
				// before (none starts with 3 digits): one record of it all.
				want[paths[1]] = []string{strings.Join(want[paths[1]], "\n")}
				var recs []string
				for _, l := range want[paths[0]] {
					if strings.HasPrefix(l, "short-") {
						recs[len(recs)-1] += "\n" + l
					} else {
						recs = append(recs, l)
					}
				}
				want[paths[0]] = recs
			}
			for _, p := range paths {
				if len(got[p]) != len(want[p]) || strings.Join(got[p], "\n") != strings.Join(want[p], "\n") {
					for i := range min(len(got[p]), len(want[p])) {
						if got[p][i] != want[p][i] {
							t.Logf("record %d: %.20q...%q, want %.20q...%q", i, got[p][i], got[p][i][max(0, len(got[p][i])-20):], want[p][i], want[p][i][max(0, len(want[p][i])-20):])
							break
						}
					}
					t.Fatalf("%s: collected %d records, want %d (or not in order)", p, len(got[p]), len(want[p]))
				}
			}
			t.Logf("%d batches, the largest %d bytes", batches, most)
		})
	}
}
