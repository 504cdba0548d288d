// Package filtertest is the conformance suite every filters.Filter passes:
// the builtins, the remote adapter (a plugin process behind gRPC) and the
// examples.
//
//	func TestConformance(t *testing.T) {
//		filtertest.Run(t, func(t *testing.T) filters.Filter { return attr.New() },
//			filtertest.Case{Name: "red", Config: map[string]string{"equals": "red"}, Records: recs, Want: want},
//			filtertest.Case{Name: "blue", ...})
//	}
package filtertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/filters"
)

// Case is one configuration with a batch and the verdicts it must give.
type Case struct {
	Name   string
	Config map[string]string
	// Records is the batch; give bodies (the suite drops them when the
	// filter does not ask for them, as the broker does).
	Records []filters.Record
	// Want is the expected Keep, one per record.
	Want []bool
}

// callTimeout bounds every call the suite makes.
const callTimeout = 10 * time.Second

// Run runs the suite against filters made by newFilter (a fresh one per
// subtest; the suite closes it). It needs at least two cases whose verdicts
// differ on the same records' positions, to check that instances with
// different configs stay isolated inside one filter.
func Run(t *testing.T, newFilter func(t *testing.T) filters.Filter, cases ...Case) {
	t.Helper()
	if len(cases) < 2 {
		t.Fatal("filtertest: Run needs at least two cases")
	}
	for _, c := range cases {
		if len(c.Records) != len(c.Want) {
			t.Fatalf("filtertest: case %s has %d records but %d wants", c.Name, len(c.Records), len(c.Want))
		}
	}
	open := func(t *testing.T) filters.Filter {
		t.Helper()
		f := newFilter(t)
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	t.Run("Verdicts", func(t *testing.T) {
		f := open(t)
		for i, c := range cases {
			id := fmt.Sprintf("verdicts-%d", i)
			bodies := initInstance(t, f, id, c.Config)
			got := accept(t, f, id, batch(c.Records, bodies))
			if !slices.Equal(got, c.Want) {
				t.Errorf("case %s: keep = %v, want %v", c.Name, got, c.Want)
			}
		}
	})
	t.Run("BodiesOnlyWhenAsked", func(t *testing.T) {
		// A filter that did not ask for bodies must judge the same without
		// them; one that asked gets them.
		f := open(t)
		for i, c := range cases {
			id := fmt.Sprintf("bodies-%d", i)
			bodies := initInstance(t, f, id, c.Config)
			recs := batch(c.Records, bodies)
			for j := range recs {
				if !bodies && recs[j].Body != nil {
					t.Fatalf("case %s: record %d has a body the filter did not ask for", c.Name, j)
				}
			}
			if got := accept(t, f, id, recs); !slices.Equal(got, c.Want) {
				t.Errorf("case %s (need_bodies=%v): keep = %v, want %v", c.Name, bodies, got, c.Want)
			}
		}
	})
	t.Run("EmptyBatch", func(t *testing.T) {
		f := open(t)
		initInstance(t, f, "empty", cases[0].Config)
		if got := accept(t, f, "empty", nil); len(got) != 0 {
			t.Errorf("empty batch: keep = %v, want none", got)
		}
	})
	t.Run("KeepLength", func(t *testing.T) {
		f := open(t)
		bodies := initInstance(t, f, "length", cases[0].Config)
		all := batch(cases[0].Records, bodies)
		for n := 0; n <= len(all); n++ {
			got := accept(t, f, "length", all[:n])
			if len(got) != n {
				t.Fatalf("batch of %d: %d keep flags", n, len(got))
			}
			if !slices.Equal(got, cases[0].Want[:n]) {
				t.Fatalf("batch of %d: keep = %v, want %v", n, got, cases[0].Want[:n])
			}
		}
	})
	t.Run("UnknownInstance", func(t *testing.T) {
		f := open(t)
		_, err := f.Accept(ctx(t), &filters.AcceptRequest{Instance: "never-initialised", Records: batch(cases[0].Records, false)})
		if !errors.Is(err, filters.ErrUnknownInstance) {
			t.Errorf("Accept on an unknown instance: err = %v, want ErrUnknownInstance", err)
		}
	})
	t.Run("ReInitReplaces", func(t *testing.T) {
		f := open(t)
		initInstance(t, f, "re", cases[0].Config)
		b1 := initInstance(t, f, "re", cases[1].Config)
		if got := accept(t, f, "re", batch(cases[1].Records, b1)); !slices.Equal(got, cases[1].Want) {
			t.Errorf("after re-Init with case %s: keep = %v, want %v", cases[1].Name, got, cases[1].Want)
		}
	})
	t.Run("InstanceIsolation", func(t *testing.T) {
		// Instances with different configs in one filter (one plugin
		// process) judge independently, also when called concurrently.
		f := open(t)
		var wg sync.WaitGroup
		errs := make(chan error, len(cases)*20)
		for i, c := range cases {
			id := fmt.Sprintf("iso-%d", i)
			bodies := initInstance(t, f, id, c.Config)
			recs := batch(c.Records, bodies)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					resp, err := f.Accept(ctx(t), &filters.AcceptRequest{Instance: id, Records: recs})
					switch {
					case err != nil:
						errs <- fmt.Errorf("instance %s: %w", id, err)
						return
					case !slices.Equal(resp.Keep, c.Want):
						errs <- fmt.Errorf("instance %s (case %s): keep = %v, want %v", id, c.Name, resp.Keep, c.Want)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("Concurrency", func(t *testing.T) {
		f := open(t)
		bodies := initInstance(t, f, "conc", cases[0].Config)
		recs := batch(cases[0].Records, bodies)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					resp, err := f.Accept(ctx(t), &filters.AcceptRequest{Instance: "conc", Partition: 3, Records: recs})
					if err != nil {
						errs <- err
						return
					}
					if !slices.Equal(resp.Keep, cases[0].Want) {
						errs <- fmt.Errorf("keep = %v, want %v", resp.Keep, cases[0].Want)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
	t.Run("CloseIdempotent", func(t *testing.T) {
		f := newFilter(t)
		if err := f.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// initInstance initialises instance id and reports whether it asked for bodies.
func initInstance(t *testing.T, f filters.Filter, id string, cfg map[string]string) bool {
	t.Helper()
	resp, err := f.Init(ctx(t), &filters.InitRequest{Instance: id, Topic: "conformance", Group: "g-" + id, Config: cfg})
	if err != nil {
		t.Fatalf("Init %s with %v: %v", id, cfg, err)
	}
	if resp == nil {
		t.Fatalf("Init %s: nil response", id)
	}
	return resp.NeedBodies
}

func accept(t *testing.T, f filters.Filter, id string, recs []filters.Record) []bool {
	t.Helper()
	resp, err := f.Accept(ctx(t), &filters.AcceptRequest{Instance: id, Topic: "conformance", Group: "g-" + id, Records: recs})
	if err != nil {
		t.Fatalf("Accept %s (%d records): %v", id, len(recs), err)
	}
	if resp == nil || len(resp.Keep) != len(recs) {
		t.Fatalf("Accept %s: %d records, response %+v", id, len(recs), resp)
	}
	return resp.Keep
}

// batch copies recs, dropping bodies unless the filter asked for them.
func batch(recs []filters.Record, bodies bool) []filters.Record {
	out := slices.Clone(recs)
	for i := range out {
		if !bodies {
			out[i].Body = nil
		} else if out[i].Body == nil {
			out[i].Body = []byte{}
		}
	}
	return out
}

// Sample returns a batch of eight records with varied metadata, for cases:
//
//	0 attribute "red", size 10      4 attribute "eu-west", size 100
//	1 attribute "blue", size 2000   5 attribute "eu-north", size 5000
//	2 no attribute, size 5          6 attribute "red", size 1024
//	3 attribute "" (empty), size 4  7 no attribute, size 0
func Sample() []filters.Record {
	type meta struct {
		attr string
		has  bool
		size int
	}
	ms := []meta{{"red", true, 10}, {"blue", true, 2000}, {"", false, 5}, {"", true, 4},
		{"eu-west", true, 100}, {"eu-north", true, 5000}, {"red", true, 1024}, {"", false, 0}}
	out := make([]filters.Record, len(ms))
	var off int64 = 1000
	for i, m := range ms {
		r := filters.Record{Offset: off, MsgID: int64(7000 + i), Attribute: m.attr, HasAttribute: m.has, Size: m.size}
		body := m.size
		if m.has {
			r.Flag = 1
			body -= 4 + len(m.attr)
		}
		r.Body = make([]byte, max(body, 0))
		for j := range r.Body {
			r.Body[j] = byte('a' + (i+j)%26)
		}
		out[i] = r
		off += int64(20 + m.size)
	}
	return out
}
