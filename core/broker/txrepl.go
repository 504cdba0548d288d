package broker

import (
	"github.com/metaq-go/metaq/core/repl"
)

// Transactions under sync replication live in core/tx (repl.go, the
// master's side, registered on the sync master as its repl.Extension by
// wireRepl; replslave.go, the slave's). What is left here is the
// broker's view of the sync master.

// syncActive is the sync master state when this broker takes puts as a
// sync master (not as a failover slave), else nil.
func (b *Broker) syncActive() *syncMaster {
	if b.sync == nil || b.replRole() == repl.RoleSlave {
		return nil
	}
	return b.sync
}
