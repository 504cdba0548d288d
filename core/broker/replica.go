package broker

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Async replication, the slave side (MetaQ's metaslave, reference §9),
// lives in core/repl (repl.Slave); this is the broker's side of it.

// replHost is what replication needs of the broker (repl.Host,
// repl.SlaveHost).
type replHost struct{ partSource }

// OpenTopic opens topic name (auto-creating it if configured) and returns
// its partition count.
func (h replHost) OpenTopic(name string) (int, error) {
	t, err := h.b.openTopic(name)
	if err != nil {
		return 0, err
	}
	return len(t.Parts), nil
}

func (h replHost) Registry() *registry.Registry {
	h.b.mu.RLock()
	defer h.b.mu.RUnlock()
	return h.b.reg
}

func (h replHost) Dial(ctx context.Context, addr string, tlsPeer bool, timeout time.Duration) (net.Conn, error) {
	return h.b.replDial(ctx, addr, tlsPeer, timeout) // repl.go
}

func (h replHost) Done() <-chan struct{} { return h.b.done }

// Go runs fn in a goroutine Close waits for.
func (h replHost) Go(fn func()) { h.b.goTracked(fn) }

// goTracked runs fn in a goroutine Close waits for.
func (b *Broker) goTracked(fn func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
}
func (h replHost) Closed() bool { return h.b.closed.Load() }

// runSlave runs the slave's loop; the caller did b.wg.Add(1).
func (b *Broker) runSlave() {
	defer b.wg.Done()
	b.slave.Run()
}

// slaveRefuses answers the requests a slave does not take (puts, mputs,
// transactions) and reports whether it did.
func (c *conn) slaveRefuses(r *protocol.Request) bool {
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut, protocol.OpTransaction:
	default:
		return false
	}
	b := c.b
	if r.Op != protocol.OpTransaction {
		b.stats.cmdPut.Add(1)
		b.stats.putFailed.Add(1)
	}
	c.reply(protocol.StatusForbidden, protocol.WithCause(protocol.CauseReadOnly,
		"broker "+strconv.Itoa(b.config().BrokerID)+" slave "+strconv.Itoa(b.slave.ID())+
			" does not accept "+r.Op.String()+"; send it to the master"), r.Opaque)
	return true
}
