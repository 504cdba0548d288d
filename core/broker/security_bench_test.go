package broker

import (
	"crypto/tls"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// benchBroker runs a broker with a plaintext and a TLS listener and, if
// cost > 0, auth on with user "bench" (password "bench-pw", bcrypt cost).
func benchBroker(b *testing.B, certs *testsvc.Certs, cost int) *Broker {
	b.Helper()
	cf, kf, _ := certs.Server(b, "server")
	cfg := conf.Default()
	cfg.Host, cfg.DataDir = "127.0.0.1", b.TempDir()
	cfg.Topics = []conf.Topic{{Name: "bench"}}
	cfg.NumPartitions = 1
	cfg.TLS = conf.TLS{CertFile: cf, KeyFile: kf, MinVersion: "1.2"}
	if cost > 0 {
		h, err := bcrypt.GenerateFromPassword([]byte("bench-pw"), cost)
		require.NoError(b, err)
		cfg.Auth = conf.Auth{Enabled: true, Users: []conf.User{{Name: "bench", PasswordHash: string(h), Admin: true}}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	cfg.Port, cfg.TLSPort = ln.Addr().(*net.TCPAddr).Port, tln.Addr().(*net.TCPAddr).Port
	br, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.NoError(b, err)
	require.NoError(b, br.ServeListeners(ln, tln))
	b.Cleanup(func() { br.Close() })
	return br
}

// benchConn dials the broker (TLS if tc is set) and logs in if auth.
func benchConn(b *testing.B, addr string, tc *tls.Config, auth bool) *authClient {
	c := dialAuth(b, addr, tc)
	c.nc.SetDeadline(time.Now().Add(10 * time.Minute))
	if auth {
		code, body := c.login("bench", "bench-pw")
		require.Equal(b, 200, code, body)
	}
	return c
}

// BenchmarkSecurity compares produce and consume throughput over
// plaintext, TLS, and with an authenticated connection (auth has no
// per-message cost: the figures match plaintext).
func BenchmarkSecurity(b *testing.B) {
	certs := testsvc.NewCerts(b)
	open := benchBroker(b, certs, 0)
	secured := benchBroker(b, certs, bcrypt.MinCost)
	const size = 1024
	data := make([]byte, size)
	transports := []struct {
		name string
		br   *Broker
		tls  bool
		auth bool
	}{
		{"plaintext", open, false, false},
		{"tls", open, true, false},
		{"plaintext+auth", secured, false, true},
		{"tls+auth", secured, true, true},
	}
	dial := func(b *testing.B, br *Broker, useTLS, auth bool) *authClient {
		if useTLS {
			return benchConn(b, br.TLSAddr(), certs.ClientConfig(b, ""), auth)
		}
		return benchConn(b, br.Addr(), nil, auth)
	}
	for _, tr := range transports {
		b.Run("produce/"+tr.name, func(b *testing.B) {
			c := dial(b, tr.br, tr.tls, tr.auth)
			const window = 64
			b.SetBytes(size)
			b.ReportAllocs()
			var buf []byte
			sent, recv := 0, 0
			b.ResetTimer()
			for recv < b.N {
				buf = buf[:0]
				for sent < b.N && sent-recv < window {
					buf = protocol.AppendPut(buf, "bench", 0, 0, -1, int32(sent+1), data)
					sent++
				}
				if len(buf) > 0 {
					_, err := c.nc.Write(buf)
					require.NoError(b, err)
				}
				for recv < sent && (sent-recv >= window/2 || sent == b.N) {
					require.NoError(b, c.dec.Decode(&c.req))
					if c.req.Code != 200 {
						b.Fatalf("put: %d %s", c.req.Code, c.req.Body)
					}
					recv++
				}
			}
		})
	}
	for _, tr := range transports {
		b.Run("consume/"+tr.name, func(b *testing.B) {
			c := dial(b, tr.br, tr.tls, tr.auth)
			// The produce runs filled the partition: read it from the start
			// in 1 MiB gets, wrapping around.
			max := tr.br.topics.Get("bench").Parts[0].MaxOffset()
			if max < 4<<20 {
				b.Skip("run with the produce benchmarks first (the partition is empty)")
			}
			var off, total int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				code, body := c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, "bench", "g", 0, off, 1<<20, op) })
				if code != 200 {
					b.Fatalf("get at %d: %d %s", off, code, body)
				}
				total += int64(len(body))
				off += int64(len(body))
				if off+(1<<20) > max {
					off = 0
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total)/b.Elapsed().Seconds()/(1<<20), "MB/s")
		})
	}
}

// BenchmarkConnect measures the per-connection cost of TLS and of auth
// (bcrypt at the default cost): dial, handshake, auth, one version round
// trip, close.
func BenchmarkConnect(b *testing.B) {
	certs := testsvc.NewCerts(b)
	open := benchBroker(b, certs, 0)
	secured := benchBroker(b, certs, bcrypt.DefaultCost)
	tc := certs.ClientConfig(b, "")
	for _, x := range []struct {
		name string
		br   *Broker
		tls  bool
		auth bool
	}{
		{"plaintext", open, false, false},
		{"plaintext+auth", secured, false, true},
		{"tls", open, true, false},
		{"tls+auth", secured, true, true},
	} {
		b.Run(x.name+"/bcrypt-cost="+strconv.Itoa(bcrypt.DefaultCost), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				addr, cfg := x.br.Addr(), (*tls.Config)(nil)
				if x.tls {
					addr, cfg = x.br.TLSAddr(), tc
				}
				c := benchConn(b, addr, cfg, x.auth)
				code, _ := c.call(protocol.AppendVersion)
				if code != 200 {
					b.Fatal(code)
				}
				c.nc.Close()
			}
		})
	}
}
