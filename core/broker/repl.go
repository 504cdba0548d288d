package broker

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/metaq-go/metaq/core/repl"
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
	return replFailoverStatus(e), e.Msg, true
}

// wireRepl registers the other components on the replication state:
// transactions on the sync master's link, failover's naming of the
// in-sync slave.
func (b *Broker) wireRepl() {
	if b.slave != nil {
		b.slave.Register(b.txm)
		if b.fo != nil {
			b.slave.SetFailover(b.fo)
		}
	}
	if b.sync == nil {
		return
	}
	b.sync.Register(b.txm)
	if b.fo != nil {
		b.sync.SetFailover(b.fo)
	}
}

// replRole is the broker's replication role: failover's state when it runs,
// else a slave's or a master's, as configured.
func (b *Broker) replRole() repl.Role {
	if b.fo != nil {
		return b.fo.Role()
	}
	if b.slave != nil {
		return repl.RoleSlave
	}
	return repl.RoleMaster
}

// replDial opens a replication connection (a slave's pulls, a sync
// master's link and control connection, a rejoin's questions) to the
// peer at addr, with the configuration as it is now (core/repl/dial.go).
func (b *Broker) replDial(ctx context.Context, addr string, tlsPeer bool, timeout time.Duration) (net.Conn, error) {
	return repl.DialerFromConf(b.config(), b.knobs.replAddr).Dial(ctx, addr, tlsPeer, timeout)
}
