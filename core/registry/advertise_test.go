package registry

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

func TestAdvertiseHost(t *testing.T) {
	t.Parallel()
	require.Equal(t, "10.1.2.3", AdvertiseHost("10.1.2.3"))
	require.Equal(t, "broker.example", AdvertiseHost("broker.example"))
	for _, h := range []string{"0.0.0.0", "::", ""} {
		got := AdvertiseHost(h)
		ip := net.ParseIP(got)
		require.NotNil(t, ip, got)
		require.False(t, ip.IsUnspecified())
	}
}

func TestListenerURIAndTopicOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", ListenerURI("meta", "h", nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	require.Equal(t, "metaqs://[::1]:"+strconv.Itoa(port), ListenerURI("metaqs", "::1", ln))
	require.Equal(t, Topic{Name: "t", NumPartitions: 3, AcceptPublish: true},
		TopicOf(conf.TopicConfig{Name: "t", NumPartitions: 3, AcceptPublish: true}))
}

// TestListenerOptions: FromConf with the listeners' URIs on the advertised
// host, and a warning when that is not the configured one.
func TestListenerOptions(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var warned []string
	warnf := func(f string, a ...any) { warned = append(warned, f) }
	o := ListenerOptions(&conf.Config{Host: "127.0.0.1", BrokerID: 4}, nil, ln, warnf)
	require.Equal(t, 4, o.BrokerID)
	require.Equal(t, "", o.URI)
	require.Equal(t, "metaqs://127.0.0.1:"+port, o.TLSURI)
	require.Empty(t, warned)
	o = ListenerOptions(&conf.Config{Host: "0.0.0.0"}, ln, nil, warnf)
	require.NotContains(t, o.URI, "0.0.0.0")
	require.Len(t, warned, 1)
}
