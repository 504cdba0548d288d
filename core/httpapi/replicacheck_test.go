package httpapi

import (
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/repl"
)

// TestReplicaCheck: the hook's verdict when one is set (whatever the
// role), none for a master without one. A slave's built-in check is
// SlaveReady's (core/broker's readyz tests run it).
func TestReplicaCheck(t *testing.T) {
	cfg := &conf.Config{}
	c := ReplicaCheck(func() (bool, string) { return false, "behind" }, repl.RoleMaster, nil, cfg)
	if c == nil || c.Name != "replica" || c.OK || c.Detail != "behind" {
		t.Fatalf("hook: %+v", c)
	}
	if c := ReplicaCheck(nil, repl.RoleMaster, nil, cfg); c != nil {
		t.Fatalf("master without a hook: %+v", c)
	}
}
