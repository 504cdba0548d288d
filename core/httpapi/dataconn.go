package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The HTTP data plane's way to the broker: every data request opens an
// in-process connection (Backend.DataConn) authenticated as the
// request's user and speaks the wire protocol on it, so that puts, gets
// and offsets take the wire's own path: ACLs, properties checks, the
// memory budget, group commit and sync replication.

const (
	// maxDataGet is the largest get an HTTP request makes (the broker
	// caps it at max_transfer_size too).
	maxDataGet = 4 << 20
	// dataOpTimeout bounds one round trip on a data connection.
	dataOpTimeout = 30 * time.Second
)

// dataConn is one HTTP request's connection to the broker.
type dataConn struct {
	nc  net.Conn
	dec *protocol.Decoder
	// shared: one's reply body is the decoder's, valid until the next
	// round trip or Close (not copied: a read's may be megabytes).
	shared bool
	// u is the user it logged in as (dialKept); tainted is set once a
	// round trip did not end with its replies read (or its context's
	// deadline could still fire): it is closed, not kept.
	u       *conf.User
	tainted bool
}

// lentWriter is a connection that takes a request's buffers as they are
// and does not wait for them to be read (the broker's in-process
// connection, core/broker/localpipe.go): the caller leaves them untouched
// until the replies to what they hold have come or it closed the
// connection.
type lentWriter interface {
	WriteLent(bufs [][]byte) error
}

// reply is one reply read on a dataConn; Body is the caller's (but see
// dataConn.shared).
type reply struct {
	Op   protocol.Op
	Code int
	Body []byte
}

// dial opens r's data connection; on failure it has answered 503.
func (s *Server) dial(w http.ResponseWriter, r *http.Request) (*dataConn, bool) {
	nc, err := s.be.DataConn(User(r), r.RemoteAddr)
	if err != nil {
		WriteError(w, http.StatusServiceUnavailable, "broker unavailable: "+err.Error())
		return nil, false
	}
	return &dataConn{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxLine: 4096, MaxBody: maxDataGet + 64<<10})}, true
}

// Close ends the connection (the broker's end closes with it).
func (d *dataConn) Close() {
	d.nc.Close()
	d.dec.Release()
}

// do writes req, n pipelined requests with opaques 1..n, and reads their
// n replies, returned by opaque (replies[i] for opaque i+1).
func (d *dataConn) do(ctx context.Context, req []byte, n int) ([]reply, error) {
	return d.doBuffers(ctx, [][]byte{req}, n)
}

// doBuffers is do for a request in pieces, written one after the other
// (not joined into one buffer first).
func (d *dataConn) doBuffers(ctx context.Context, req [][]byte, n int) ([]reply, error) {
	dl := time.Now().Add(dataOpTimeout)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	d.nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { d.nc.SetDeadline(time.Unix(1, 0)) })
	clean := false
	defer func() {
		if !stop() || !clean {
			d.tainted = true
		}
	}()
	var werr chan error
	if lw, ok := d.nc.(lentWriter); ok {
		// The broker's in-process connection: req is queued for it as it
		// is, without a goroutine (the write does not wait for the
		// broker's read). The replies come once it was read; an error
		// path closes d.nc, which drops what is unread.
		if err := lw.WriteLent(req); err != nil {
			return nil, err
		}
	} else {
		werr = make(chan error, 1)
		go func() { // a pipe write waits for the broker's read: never block the replies on it
			var err error
			for _, b := range req {
				if _, err = d.nc.Write(b); err != nil {
					break
				}
			}
			werr <- err
		}()
	}
	out := make([]reply, n)
	var rr protocol.Request
	for got := 0; got < n; got++ {
		if err := d.dec.Decode(&rr); err != nil {
			d.nc.Close()
			waitWrite(werr)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		i := int(rr.Opaque) - 1
		if rr.Op != protocol.OpResult && rr.Op != protocol.OpValue {
			d.nc.Close()
			waitWrite(werr)
			return nil, errors.New("unexpected " + rr.Op.String() + " reply")
		}
		if i < 0 || i >= n {
			// A reply to no request of ours: the broker answering a
			// frame it could not read (opaque 0). Keep its words.
			if got == 0 && rr.Code >= 400 {
				d.nc.Close()
				waitWrite(werr)
				return nil, &RequestError{Status: rr.Code, Msg: string(rr.Body)}
			}
			continue
		}
		out[i] = reply{Op: rr.Op, Code: rr.Code, Body: rr.Body}
		if !d.shared || n > 1 {
			out[i].Body = append([]byte(nil), rr.Body...)
		}
		if rr.Op == protocol.OpValue {
			out[i].Code = protocol.StatusOK
		}
	}
	if err := waitWrite(werr); err != nil {
		return nil, err
	}
	clean = true
	return out, nil
}

// waitWrite is the writer goroutine's error (none without one).
func waitWrite(werr chan error) error {
	if werr == nil {
		return nil
	}
	return <-werr
}

// one is do for a single request.
func (d *dataConn) one(ctx context.Context, req []byte) (reply, error) {
	rs, err := d.do(ctx, req, 1)
	if err != nil {
		return reply{}, err
	}
	return rs[0], nil
}

// httpStatus is the HTTP status of a broker reply code (itself when it
// is one HTTP knows, 500 otherwise).
func httpStatus(code int) int {
	if code >= 200 && code <= 599 && http.StatusText(code) != "" {
		return code
	}
	return http.StatusInternalServerError
}

// wireToken checks a name that goes into a request line: not empty, at
// most 255 bytes, no space or control byte.
func wireToken(what, s string) error {
	if s == "" {
		return errors.New(what + " is required")
	}
	if len(s) > 255 {
		return errors.New(what + " is longer than 255 bytes")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return errors.New(what + " " + quoteName(s) + " holds a space or control byte at " + strconv.Itoa(i))
		}
	}
	return nil
}

// failed answers a round trip's error.
func failed(w http.ResponseWriter, err error) {
	var re *RequestError
	switch {
	case errors.As(err, &re):
		WriteError(w, httpStatus(re.Status), re.Msg)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, net.ErrClosed):
		WriteError(w, http.StatusGatewayTimeout, "timed out waiting for the broker: "+err.Error())
	default:
		WriteError(w, http.StatusBadGateway, "broker connection failed: "+err.Error())
	}
}
