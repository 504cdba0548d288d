package broker

import (
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestGroupTwoPhaseHandover drives the state machine directly: a partition
// moving from a to b is granted to b only after a acknowledges.
func TestGroupTwoPhaseHandover(t *testing.T) {
	now := time.Unix(1000, 0)
	gs := &groupSet{timeout: 3 * time.Second, now: func() time.Time { return now }}
	ca, cb := &conn{}, &conn{}
	k := groupKey{"g", "t"}
	gen, va, err := gs.join(ca, k, "a", "default", 4, 0)
	if err != nil || len(va) != 4 {
		t.Fatalf("a join: %v %v", va, err)
	}
	genA := gen
	_, vb, err := gs.join(cb, k, "b", "default", 4, 0)
	if err != nil || len(vb) != 0 {
		t.Fatalf("b must wait for a's acknowledgement, got %v %v", vb, err)
	}
	if _, _, err := gs.join(&conn{}, k, "c", "consist", 4, 0); err == nil || err.code != protocol.StatusBadRequest {
		t.Fatalf("strategy mismatch: %v", err)
	}
	if _, _, err := gs.join(&conn{}, k, "a", "default", 4, 0); err == nil || err.code != protocol.StatusConflict {
		t.Fatalf("same id on another connection: %v", err)
	}
	// a heartbeats with its old view's generation: it learns of the revocation.
	gen, va, _ = gs.heartbeat(ca, k, "a", genA)
	if len(va) != 2 {
		t.Fatalf("a's view after rebalance: %v", va)
	}
	// b still gets nothing: a has not acknowledged.
	_, vb, _ = gs.heartbeat(cb, k, "b", 0)
	if len(vb) != 0 {
		t.Fatalf("b granted before a acknowledged: %v", vb)
	}
	gs.heartbeat(ca, k, "a", gen) // the acknowledgement
	_, vb, _ = gs.heartbeat(cb, k, "b", 0)
	if len(vb) != 2 {
		t.Fatalf("b after a acknowledged: %v", vb)
	}
	// a goes silent: after the session timeout b takes everything (once b
	// has acknowledged its view, nothing else holds).
	now = now.Add(2 * time.Second)
	gs.heartbeat(cb, k, "b", 0)
	now = now.Add(2 * time.Second)
	g2, vb, _ := gs.heartbeat(cb, k, "b", 0)
	if len(vb) != 4 {
		t.Fatalf("b after a timed out: %v", vb)
	}
	if _, _, err := gs.heartbeat(ca, k, "a", g2); err == nil || err.code != protocol.StatusNotFound {
		t.Fatalf("expired member: %v", err)
	}
	gs.connClosed(cb)
	if len(gs.groups) != 0 {
		t.Fatal("group not removed with its last member")
	}
}
