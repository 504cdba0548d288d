package broker

import (
	"net"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/localpipe"
)

// The HTTP data plane (core/httpapi data.go: MetaQ's /put, /get and
// /offset, the JSON records API, the event streams) reaches the broker
// through in-process connections: one end of a localpipe is served as a
// client connection is, already authenticated as the HTTP request's
// user, so every request takes the wire's own path (ACLs, properties
// checks, filters, the memory budget, group commit and sync
// replication) and nothing of it is written twice.

// pipeConn is the broker's end of a local connection: its remote
// address is the HTTP client's, for the logs (that of the request using
// it: the produce handler keeps its connections for the next request).
type pipeConn struct {
	*localpipe.End
}

func (p pipeConn) RemoteAddr() net.Addr { return httpAddr(p.Remote()) }

// httpAddr is an HTTP client's address as a local connection's remote
// address.
type httpAddr string

func (a httpAddr) Network() string { return "http" }
func (a httpAddr) String() string  { return string(a) }

// localConn opens an in-process connection for remote (an HTTP client's
// "ip:port") authenticated as u (nil with [auth] off). The caller closes
// the returned end; the broker's end then closes too. It counts among the
// broker's connections (stats, drain at shutdown) but not against
// max_connections: http_max_connections bounds the HTTP requests.
func (b *Broker) localConn(u *conf.User, remote string) (net.Conn, error) {
	cli, srv := localpipe.New()
	cli.SetRemote(remote)
	c := newConn(b, pipeConn{srv})
	c.local = srv
	c.handshook.Store(true)
	c.auth.CertChecked = true
	if u != nil {
		c.auth.Login(u, b.config())
	}
	b.connsMu.Lock()
	if b.closed.Load() {
		b.connsMu.Unlock()
		cli.Close()
		srv.Close()
		return nil, errBrokerClosed
	}
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	b.connsMu.Unlock()
	b.stats.connections.Add(1)
	go func() {
		defer b.wg.Done()
		c.serve()
		b.connsMu.Lock()
		delete(b.conns, c)
		b.connsMu.Unlock()
		b.stats.connections.Add(-1)
	}()
	return cli, nil
}

// DataConn opens an in-process connection for the HTTP data plane.
func (h httpBackend) DataConn(u *conf.User, remote string) (net.Conn, error) {
	return h.b.localConn(u, remote)
}

// Partitions is the number of partitions of topic (0: not open here).
func (h httpBackend) Partitions(topic string) int {
	b := h.b
	t := b.topics.Get(topic)
	if t == nil {
		return 0
	}
	return len(t.Parts)
}
