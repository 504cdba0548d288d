package partition

import (
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/idem"
)

// TestIdemConfigRun: a table's bounds from the configuration, and Run
// ending when done closes.
func TestIdemConfigRun(t *testing.T) {
	got := IdemConfig(&conf.Config{IdempotentProducers: 7, IdempotentIdleExpiry: 90, IdempotentRebuildBytes: 1 << 20})
	if want := (idem.Config{MaxProducers: 7, IdleExpiry: 90 * time.Second, RebuildBytes: 1 << 20}); got != want {
		t.Fatalf("IdemConfig = %+v, want %+v", got, want)
	}
	ts := NewIdemTables(func() idem.Config { return got }, func() int64 { return 1 << 20 }, func() (int64, bool) { return 0, false })
	done, ended := make(chan struct{}), make(chan struct{})
	go func() { ts.Run(done); close(ended) }()
	close(done)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end when done closed")
	}
}
