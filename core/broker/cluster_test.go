package broker

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// clusterBroker starts broker id registered under root, with mods applied
// to its config.
func clusterBroker(t *testing.T, zkAddr, root string, id int, mods ...func(*conf.Config)) *Broker {
	t.Helper()
	base := func(cfg *conf.Config) {
		cfg.BrokerID = id
		cfg.AutoCreateTopics = true
		pubOff := false
		cfg.Topics = []conf.Topic{{Name: "t"}, {Name: "nopub", AcceptPublish: &pubOff}}
		cfg.ZooKeeper.Connect = zkAddr
		cfg.ZooKeeper.Root = root
		cfg.ZooKeeper.SessionTimeout = 4000
		cfg.ZooKeeper.ConnectionTimeout = 1000
	}
	return fixture{mods: append([]func(*conf.Config){base}, mods...), opts: Options{Logf: t.Logf}}.start(t)
}

// waitRegistered waits until b is registered in ZooKeeper: a broker whose
// connection to ZooKeeper takes longer than its connection_timeout (a
// loaded machine) starts serving first and registers once connected
// (TestClusterZooKeeperDownAtStart).
func waitRegistered(t *testing.T, b *Broker) {
	t.Helper()
	waitFor(t, 20*time.Second, func() error {
		if !b.Registered() {
			return errors.New("not registered in ZooKeeper")
		}
		return nil
	})
}

func zkGet(c *zk.Conn, p string) (string, error) {
	v, _, err := c.Get(p)
	return string(v), err
}

func waitFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkBroker checks broker b's nodes (as the registry writes them) under root.
func checkBroker(c *zk.Conn, root string, b *Broker) error {
	_, port, _ := net.SplitHostPort(b.Addr())
	id := b.config().BrokerID
	m := zkpath.MasterName(id)
	want := map[string]string{
		zkpath.Broker(root, id):                 "meta://127.0.0.1:" + port,
		zkpath.Master(root, id):                 "meta://127.0.0.1:" + port,
		zkpath.MasterChecksum(root, id):         fmt.Sprint(b.configChecksum()),
		zkpath.TopicsPub.Node(root, "t", m):     `{"numParts":2,"broker":"` + m.String() + `"}`,
		zkpath.TopicsSub.Node(root, "t", m):     `{"numParts":2,"broker":"` + m.String() + `"}`,
		zkpath.TopicsSub.Node(root, "nopub", m): `{"numParts":2,"broker":"` + m.String() + `"}`,
		zkpath.Topics.Node(root, "nopub", m):    "2",
	}
	for p, w := range want {
		v, err := zkGet(c, p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if v != w {
			return fmt.Errorf("%s = %q, want %q", p, v, w)
		}
	}
	if ok, _, _ := c.Exists(zkpath.TopicsPub.Node(root, "nopub", m)); ok {
		return errors.New("topics-pub/nopub exists")
	}
	return nil
}

func zkClient(t *testing.T, addr string) *zk.Conn {
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestClusterTwoBrokers: brokers 1 and 2 (port 0) register side by side
// with their real ports; an auto-created topic is added; Close unregisters.
func TestClusterTwoBrokers(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/brokertest"
	b1 := clusterBroker(t, addr, root, 1)
	b2 := clusterBroker(t, addr, root, 2)
	waitRegistered(t, b1)
	waitRegistered(t, b2)
	c := zkClient(t, addr)
	require.NoError(t, checkBroker(c, root, b1))
	require.NoError(t, checkBroker(c, root, b2))
	ids, _, err := c.Children(zkpath.BrokerIDs(root))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"1", "2"}, ids)

	_, err = b1.lookup([]byte("auto"), true)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, func() error {
		v, err := zkGet(c, zkpath.TopicsPub.Node(root, "auto", zkpath.MasterName(1)))
		if err == nil && v != `{"numParts":2,"broker":"1-m"}` {
			err = fmt.Errorf("data %q", v)
		}
		return err
	})

	require.NoError(t, b1.Close())
	ids, _, err = c.Children(zkpath.BrokerIDs(root))
	require.NoError(t, err)
	require.Equal(t, []string{"2"}, ids)
	kids, _, err := c.Children(zkpath.TopicsSub.Topic(root, "t"))
	require.NoError(t, err)
	require.Equal(t, []string{"2-m"}, kids)
}

// TestClusterZooKeeperDownAtStart: the broker serves within the
// connection timeout though ZooKeeper is down, and registers when it comes up.
func TestClusterZooKeeperDownAtStart(t *testing.T) {
	t.Parallel()
	z := testsvc.NewZooKeeper(t)
	z.Stop()
	start := time.Now()
	b := clusterBroker(t, z.Addr(), "/meta", 3)
	require.Less(t, time.Since(start), 10*time.Second)
	require.False(t, b.Registered())
	nc, err := net.DialTimeout("tcp", b.Addr(), time.Second)
	require.NoError(t, err, "the broker serves without ZooKeeper")
	nc.Close()

	require.NoError(t, z.Start())
	up := time.Now()
	waitFor(t, 20*time.Second, func() error {
		if !b.Registered() {
			return errors.New("not registered")
		}
		return nil
	})
	t.Logf("registered %v after ZooKeeper started", time.Since(up))
	require.NoError(t, checkBroker(zkClient(t, z.Addr()), "/meta", b))
}

func TestLocalModeHasNoRegistry(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	require.Nil(t, b.reg)
	require.False(t, b.Registered())
}
