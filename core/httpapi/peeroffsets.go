package httpapi

// The dashboard's reads of other brokers' partition offsets (cluster
// mode, docs/dashboard.md): the lag of a group's partitions on another
// broker needs that broker's max offsets. Each is one `stats offsets`
// request over the broker's data port (on a connection kept for the next
// read), with the replication link's
// dialer (core/repl: TLS to a TLS-only broker, replication_tls_ca_file)
// and, with replication_user set, its login. A read is bounded by
// peerReadTimeout, the reads of several brokers run at once, one read per
// broker is in flight at a time, and an answer (or a failure) is kept
// for peerOffsetsTTL: a page view does not fan out a request per
// partition. Nothing here runs on a connection's read loop.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/internal/brokerstats"
	"github.com/metaq-go/metaq/sdk/protocol"
)

const (
	// peerReadTimeout bounds one read of a broker's offsets: dial, TLS,
	// login and the stats request.
	peerReadTimeout = 1500 * time.Millisecond
	// peerOffsetsTTL is how long an answer is reused.
	peerOffsetsTTL = PeerOffsetsEvery
	// peerMaxBody bounds the stats reply read.
	peerMaxBody = 16 << 20
)

// PeerReader reads other brokers' `stats offsets` for the dashboard,
// caches the answers by broker id and keeps a connection to each. Dialer
// gives the replication link's dialer as configured now (its address
// mapping, TLS and replication_user's login). The zero value with Dialer
// set is ready; Close closes the kept connections.
type PeerReader struct {
	Dialer func() repl.Dialer

	mu     sync.Mutex
	m      map[int]*peerRead
	conns  map[int]*peerConn
	closed bool
}

// peerRead is one read of a broker's offsets: done is closed when res is
// set.
type peerRead struct {
	addr string
	tls  bool
	done chan struct{}
	at   time.Time
	res  PeerOffsets
}

// Offsets reads the offsets of brokers (answers younger than
// peerOffsetsTTL are reused), at most until ctx ends: a broker that has
// not answered by then is reported as such, and its read goes on in the
// background (bounded by peerReadTimeout) for the next page view.
func (ps *PeerReader) Offsets(ctx context.Context, brokers []PeerBroker) map[int]PeerOffsets {
	now := time.Now()
	reads := make(map[int]*peerRead, len(brokers))
	ps.mu.Lock()
	if ps.m == nil {
		ps.m = map[int]*peerRead{}
	}
	for _, p := range brokers {
		r := ps.m[p.ID]
		fresh := r != nil && r.addr == p.Addr && r.tls == p.TLS
		if fresh {
			select {
			case <-r.done:
				fresh = now.Sub(r.at) < peerOffsetsTTL
			default: // in flight
			}
		}
		if !fresh {
			r = &peerRead{addr: p.Addr, tls: p.TLS, done: make(chan struct{})}
			ps.m[p.ID] = r
			go func() {
				r.res = ps.ReadOnce(p)
				r.at = time.Now()
				close(r.done)
			}()
		}
		reads[p.ID] = r
	}
	ps.mu.Unlock()
	out := make(map[int]PeerOffsets, len(reads))
	for id, r := range reads {
		select {
		case <-r.done:
			out[id] = r.res
		case <-ctx.Done():
			out[id] = PeerOffsets{Err: fmt.Sprintf("broker %d did not answer within %v", id, time.Since(now).Round(100*time.Millisecond))}
		}
	}
	return out
}

// peerConn is a connection to another broker, logged in, kept between
// reads (one per broker: a login costs the other broker a password hash
// check).
type peerConn struct {
	nc   net.Conn
	dec  *protocol.Decoder
	addr string
	tls  bool
	user string
}

func (c *peerConn) close() {
	c.nc.Close()
	c.dec.Release()
}

// take returns broker p's idle connection if it was opened as p and user
// say, nil otherwise.
func (ps *PeerReader) take(p PeerBroker, user string) *peerConn {
	ps.mu.Lock()
	c := ps.conns[p.ID]
	delete(ps.conns, p.ID)
	ps.mu.Unlock()
	if c != nil && (c.addr != p.Addr || c.tls != p.TLS || c.user != user) {
		c.close()
		c = nil
	}
	return c
}

// put keeps c as broker id's idle connection (closed when the broker
// closes or one is kept already).
func (ps *PeerReader) put(id int, c *peerConn) {
	ps.mu.Lock()
	if ps.conns == nil {
		ps.conns = map[int]*peerConn{}
	}
	if ps.closed || ps.conns[id] != nil {
		ps.mu.Unlock()
		c.close()
		return
	}
	ps.conns[id] = c
	ps.mu.Unlock()
}

// Close closes the idle connections; none is kept after it.
func (ps *PeerReader) Close() {
	ps.mu.Lock()
	cs := ps.conns
	ps.conns, ps.closed = nil, true
	ps.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}

// ReadOnce asks broker p now (no cached answer) for `stats offsets`, on
// the connection
// kept from the last read (again on a new one if the broker closed it:
// its idle_timeout, a restart) or a new one.
func (ps *PeerReader) ReadOnce(p PeerBroker) PeerOffsets {
	d := ps.Dialer()
	ctx, cancel := context.WithTimeout(context.Background(), peerReadTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	user := d.User
	if c := ps.take(p, user); c != nil {
		res, err := peerStats(c, p, deadline)
		if err == nil {
			ps.put(p.ID, c)
			return res
		}
		c.close()
	}
	c, err := dialPeer(ctx, d, p, deadline)
	if err != nil {
		return peerFailed(p, err)
	}
	res, err := peerStats(c, p, deadline)
	if err != nil {
		c.close()
		var refused peerRefused
		if errors.As(err, &refused) {
			return PeerOffsets{Err: string(refused)}
		}
		return peerFailed(p, err)
	}
	ps.put(p.ID, c)
	return res
}

// dialPeer opens a connection to broker p and logs in as
// replication_user when it is set, by deadline.
func dialPeer(ctx context.Context, d repl.Dialer, p PeerBroker, deadline time.Time) (*peerConn, error) {
	user, password := d.User, d.Password
	d.User = "" // logged in below, by the deadline (Dial waits out a refusal's failure_delay)
	nc, err := d.Dial(ctx, p.Addr, p.TLS, peerReadTimeout)
	if err != nil {
		return nil, err
	}
	c := &peerConn{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: peerMaxBody}), addr: p.Addr, tls: p.TLS, user: user}
	if user != "" {
		nc.SetDeadline(deadline)
		r, err := peerCall(c, protocol.AppendAuthPlain(nil, user, password, 1))
		if err == nil && r.Code != protocol.StatusOK {
			err = fmt.Errorf("login as replication_user %q refused: %d %s", user, r.Code, protocol.Printable(r.Body))
		}
		if err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// peerRefused is a broker's refusal that says all (no address needed).
type peerRefused string

func (e peerRefused) Error() string { return string(e) }

// peerStats sends `stats offsets` on c by deadline.
func peerStats(c *peerConn, p PeerBroker, deadline time.Time) (PeerOffsets, error) {
	c.nc.SetDeadline(deadline)
	r, err := peerCall(c, protocol.AppendStats(nil, "offsets", 2))
	switch {
	case err != nil:
		return PeerOffsets{}, err
	case r.Code == protocol.StatusUnauthorized && c.user == "":
		return PeerOffsets{}, peerRefused(fmt.Sprintf("broker %d needs a login (users are configured there) and replication_user is not set: "+
			"this broker cannot read its offsets", p.ID))
	case r.Code != protocol.StatusOK:
		return PeerOffsets{}, fmt.Errorf("stats offsets refused: %d %s", r.Code, protocol.Printable(r.Body))
	}
	parts, err := brokerstats.ParsePartitions(string(r.Body))
	if err != nil {
		return PeerOffsets{}, err
	}
	out := PeerOffsets{Max: make(map[string]map[int32]int64, len(parts))}
	for t, ps := range parts {
		m := make(map[int32]int64, len(ps))
		for _, x := range ps {
			m[x.Partition] = x.Max
		}
		out.Max[t] = m
	}
	return out, nil
}

// peerCall sends req on c and decodes its answer.
func peerCall(c *peerConn, req []byte) (*protocol.Request, error) {
	if _, err := c.nc.Write(req); err != nil {
		return nil, err
	}
	var r protocol.Request
	if err := c.dec.Decode(&r); err != nil {
		return nil, err
	}
	if r.Op != protocol.OpResult {
		return nil, errors.New("unexpected reply")
	}
	return &r, nil
}

// peerFailed is a failed read of broker p's offsets.
func peerFailed(p PeerBroker, err error) PeerOffsets {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return PeerOffsets{Err: fmt.Sprintf("broker %d at %s did not answer within %v", p.ID, p.Addr, peerReadTimeout)}
	}
	return PeerOffsets{Err: fmt.Sprintf("broker %d at %s: %v", p.ID, p.Addr, err)}
}
