package brokertest_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

func send(t *testing.T, addr, topic string, opts ...client.Opt) client.SendResult {
	t.Helper()
	p, err := client.New(append([]client.Opt{client.Brokers(addr)}, opts...)...)
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("x")})
	require.NoError(t, err)
	return res[0]
}

// TestStart: the options reach the broker, which serves on 127.0.0.1, and
// a restart on the same address with the same config finds the data.
func TestStart(t *testing.T) {
	b := brokertest.Start(t, brokertest.Topics("a", "b"), brokertest.Partitions(3), brokertest.Threshold(5))
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, b.Addr())
	tc, ok := b.Config.TopicConfig("a")
	require.True(t, ok)
	require.Equal(t, 3, tc.NumPartitions)
	require.Equal(t, 5, tc.UnflushThreshold)
	res := send(t, b.Addr(), "a")
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close is idempotent")

	again := brokertest.Start(t, brokertest.Config(b.Config), brokertest.Listen(b.Addr()))
	require.Equal(t, b.Addr(), again.Addr())
	require.Greater(t, send(t, again.Addr(), "a").Offset, res.Offset, "the data directory is reused")
	require.Contains(t, again.Logs.String(), "listening on "+b.Addr())
}

// TestTLSAndZooKeeper: a TLS-only broker in cluster mode registers its
// metaqs:// address, and serves a TLS client.
func TestTLSAndZooKeeper(t *testing.T) {
	certs := testsvc.NewCerts(t)
	cert, key, _ := certs.Server(t, "broker")
	connect := testsvc.ZooKeeper(t)
	b := brokertest.Start(t, brokertest.Topics("a"), brokertest.TLS(conf.TLS{CertFile: cert, KeyFile: key}),
		brokertest.TLSOnly(), brokertest.ZooKeeper(connect, "/brokertest", 4))
	require.Empty(t, b.Addr())
	require.NotEmpty(t, b.TLSAddr())
	c, _, err := zk.Connect([]string{connect}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	defer c.Close()
	data, _, err := c.Get(zkpath.Master("/brokertest", 4))
	require.NoError(t, err)
	require.Equal(t, "metaqs://"+b.TLSAddr(), string(data))
	send(t, b.TLSAddr(), "a", client.DialTLS(&tls.Config{RootCAs: certs.Pool(), ServerName: "127.0.0.1"}))
}

// TestStartServer runs the real binary and stops it cleanly.
func TestStartServer(t *testing.T) {
	dir := t.TempDir()
	s := brokertest.StartServer(t, "--config", "../../conf/server.toml", "--port", "0", "--http-port", "0", "--host", "127.0.0.1", "--data-dir", dir)
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, s.Addr)
	send(t, s.Addr, "meta-test")
	s.Stop(t)
}
