package registry

import (
	"net"
	"strconv"

	"github.com/metaq-go/metaq/conf"
)

// TopicOf is the registered form of a topic's config.
func TopicOf(tc conf.TopicConfig) Topic {
	return Topic{
		Name:            tc.Name,
		NumPartitions:   tc.NumPartitions,
		AcceptPublish:   tc.AcceptPublish,
		AcceptSubscribe: tc.AcceptSubscribe,
	}
}

// ListenerURI is scheme://host:port of ln's bound port, or "" for no
// listener (a TLS-only broker has no meta:// URI, one without [tls] no
// metaqs:// URI).
func ListenerURI(scheme, host string, ln net.Listener) string {
	if ln == nil {
		return ""
	}
	port := 0
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		port = a.Port
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// AdvertiseHost is the host put in the registered URI: the listen host,
// or for a wildcard listen address the first non-loopback IPv4 address of
// this machine (127.0.0.1 if there is none).
func AdvertiseHost(h string) string {
	ip := net.ParseIP(h)
	if h != "" && (ip == nil || !ip.IsUnspecified()) {
		return h
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}
