package broker

// The dashboard's reads of other brokers' partition offsets (cluster
// mode, docs/dashboard.md): the lag of a group's partitions on another
// broker needs that broker's max offsets. Each is one `stats offsets`
// request over the broker's data port, with the replication link's
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

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/internal/brokerstats"
	"github.com/metaq-go/metaq/sdk/protocol"
)

const (
	// peerReadTimeout bounds one read of a broker's offsets: dial, TLS,
	// login and the stats request.
	peerReadTimeout = 1500 * time.Millisecond
	// peerOffsetsTTL is how long an answer is reused.
	peerOffsetsTTL = httpapi.PeerOffsetsEvery
	// peerMaxBody bounds the stats reply read.
	peerMaxBody = 16 << 20
)

// peerOffsets caches other brokers' `stats offsets`, by broker id.
type peerOffsets struct {
	mu sync.Mutex
	m  map[int]*peerRead
}

// peerRead is one read of a broker's offsets: done is closed when res is
// set.
type peerRead struct {
	addr string
	tls  bool
	done chan struct{}
	at   time.Time
	res  httpapi.PeerOffsets
}

// peerOffsetsOf reads the offsets of brokers ps (answers younger than
// peerOffsetsTTL are reused), at most until ctx ends: a broker that has
// not answered by then is reported as such, and its read goes on in the
// background (bounded by peerReadTimeout) for the next page view.
func (b *Broker) peerOffsetsOf(ctx context.Context, ps []httpapi.PeerBroker) map[int]httpapi.PeerOffsets {
	now := time.Now()
	reads := make(map[int]*peerRead, len(ps))
	b.peers.mu.Lock()
	if b.peers.m == nil {
		b.peers.m = map[int]*peerRead{}
	}
	for _, p := range ps {
		r := b.peers.m[p.ID]
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
			b.peers.m[p.ID] = r
			go func() {
				r.res = b.readPeerOffsets(p)
				r.at = time.Now()
				close(r.done)
			}()
		}
		reads[p.ID] = r
	}
	b.peers.mu.Unlock()
	out := make(map[int]httpapi.PeerOffsets, len(reads))
	for id, r := range reads {
		select {
		case <-r.done:
			out[id] = r.res
		case <-ctx.Done():
			out[id] = httpapi.PeerOffsets{Err: fmt.Sprintf("broker %d did not answer within %v", id, time.Since(now).Round(100*time.Millisecond))}
		}
	}
	return out
}

// readPeerOffsets asks broker p for `stats offsets`.
func (b *Broker) readPeerOffsets(p httpapi.PeerBroker) httpapi.PeerOffsets {
	cfg := b.config()
	ctx, cancel := context.WithTimeout(context.Background(), peerReadTimeout)
	defer cancel()
	d := repl.DialerFromConf(cfg, b.knobs.replAddr)
	user, password := d.User, d.Password
	d.User = "" // logged in below, within the deadline (Dial waits out a refusal's failure_delay)
	nc, err := d.Dial(ctx, p.Addr, p.TLS, peerReadTimeout)
	if err != nil {
		return peerFailed(p, err)
	}
	defer nc.Close()
	deadline, _ := ctx.Deadline()
	nc.SetDeadline(deadline)
	dec := protocol.NewDecoder(nc, protocol.Limits{MaxBody: peerMaxBody})
	defer dec.Release()
	if user != "" {
		r, err := peerCall(nc, dec, protocol.AppendAuthPlain(nil, user, password, 1))
		if err == nil && r.Code != protocol.StatusOK {
			err = fmt.Errorf("login as replication_user %q refused: %d %s", user, r.Code, protocol.Printable(r.Body))
		}
		if err != nil {
			return peerFailed(p, err)
		}
	}
	r, err := peerCall(nc, dec, protocol.AppendStats(nil, "offsets", 2))
	switch {
	case err != nil:
	case r.Code == protocol.StatusUnauthorized && user == "":
		return httpapi.PeerOffsets{Err: fmt.Sprintf("broker %d needs a login (users are configured there) and replication_user is not set: "+
			"this broker cannot read its offsets", p.ID)}
	case r.Code != protocol.StatusOK:
		err = fmt.Errorf("stats offsets refused: %d %s", r.Code, protocol.Printable(r.Body))
	}
	var parts map[string][]brokerstats.Partition
	if err == nil {
		parts, err = brokerstats.ParsePartitions(string(r.Body))
	}
	if err != nil {
		return peerFailed(p, err)
	}
	out := httpapi.PeerOffsets{Max: make(map[string]map[int32]int64, len(parts))}
	for t, ps := range parts {
		m := make(map[int32]int64, len(ps))
		for _, x := range ps {
			m[x.Partition] = x.Max
		}
		out.Max[t] = m
	}
	return out
}

// peerCall sends req on nc and decodes its answer.
func peerCall(nc net.Conn, dec *protocol.Decoder, req []byte) (*protocol.Request, error) {
	if _, err := nc.Write(req); err != nil {
		return nil, err
	}
	var r protocol.Request
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if r.Op != protocol.OpResult {
		return nil, errors.New("unexpected reply")
	}
	return &r, nil
}

// peerFailed is a failed read of broker p's offsets.
func peerFailed(p httpapi.PeerBroker, err error) httpapi.PeerOffsets {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return httpapi.PeerOffsets{Err: fmt.Sprintf("broker %d at %s did not answer within %v", p.ID, p.Addr, peerReadTimeout)}
	}
	return httpapi.PeerOffsets{Err: fmt.Sprintf("broker %d at %s: %v", p.ID, p.Addr, err)}
}
