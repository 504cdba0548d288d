package broker

import (
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
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

// entriesSize is the bytes entries take in a partition.
func entriesSize(entries []store.Entry) int64 {
	var n int64
	for i := range entries {
		n += int64(message.HeaderSize + len(entries[i].Data))
	}
	return n
}
