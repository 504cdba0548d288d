package broker

import (
	"errors"

	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The broker's side of replication (core/repl): the wiring of the
// replication state with the other components, and the mapping of its
// errors to status lines.

func init() { registerErrors(replStatus) }

// replStatus maps replication's typed errors: their text is the body,
// exactly as MetaQ words it ("Slave is disconnected ...").
func replStatus(err error) (int, string, bool) {
	var e *repl.Error
	if !errors.As(err, &e) {
		return 0, "", false
	}
	return protocol.StatusInternalError, e.Msg, true // every kind: 500
}

// wireRepl registers the other components on the replication state:
// transactions on the sync master's link, failover's naming of the
// in-sync slave.
func (b *Broker) wireRepl() {
	if b.sync == nil {
		return
	}
	b.sync.Register(b.txm)
	if b.fo != nil {
		b.sync.SetNamer(b.fo)
	}
}
