package filtertest

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/metaq-go/metaq/filters"
)

// Probe returns a filter for testing transports and hosts: an instance
// configured with bodies = "true" asks for bodies; every instance keeps
// exactly the records that arrived with a body. It also fails Init for a
// config with fail = "true" (ErrBadConfig).
func Probe() filters.Filter {
	return filters.NewRecordFilter(func(req *filters.InitRequest) (func(*filters.Record) bool, bool, error) {
		if req.Config["fail"] == "true" {
			return nil, false, filters.ErrBadConfig
		}
		bodies, _ := strconv.ParseBool(req.Config["bodies"])
		return func(r *filters.Record) bool { return r.Body != nil }, bodies, nil
	})
}

// RunTransport checks that a host-to-filter transport (the remote adapter)
// carries NeedBodies, bodies and errors faithfully. newProbe must return a
// transport whose far end serves Probe.
func RunTransport(t *testing.T, newProbe func(t *testing.T) filters.Filter) {
	t.Helper()
	f := newProbe(t)
	t.Cleanup(func() { _ = f.Close() })
	recs := []filters.Record{
		{Offset: 0, MsgID: 1, Size: 3, Body: []byte("abc")},
		{Offset: 23, MsgID: 2, Size: 0, Body: []byte{}},
		{Offset: 43, MsgID: 3, Flag: 1, Attribute: "x", HasAttribute: true, Size: 7, Body: []byte("zz")},
	}
	for _, bodies := range []bool{false, true} {
		id := "probe-" + strconv.FormatBool(bodies)
		got := initInstance(t, f, id, map[string]string{"bodies": strconv.FormatBool(bodies)})
		if got != bodies {
			t.Fatalf("Init with bodies=%v: NeedBodies = %v", bodies, got)
		}
		keep := accept(t, f, id, batch(recs, bodies))
		for i, k := range keep {
			if k != bodies {
				t.Errorf("need_bodies=%v: record %d arrived with body=%v", bodies, i, k)
			}
		}
	}
	if _, err := f.Init(ctx(t), &filters.InitRequest{Instance: "bad", Config: map[string]string{"fail": "true"}}); !isBadConfig(err) {
		t.Errorf("Init with a bad config: err = %v, want ErrBadConfig", err)
	}
	if _, err := f.Accept(context.Background(), &filters.AcceptRequest{Instance: "nope"}); !isUnknown(err) {
		t.Errorf("Accept on an unknown instance: err = %v, want ErrUnknownInstance", err)
	}
}

func isBadConfig(err error) bool { return errors.Is(err, filters.ErrBadConfig) }
func isUnknown(err error) bool   { return errors.Is(err, filters.ErrUnknownInstance) }
