package conf

import (
	"net"
	"strconv"
)

// DefaultHTTPPort is the HTTP listener's port when http_port is not set:
// 8120, MetaQ's dashboard port.
const DefaultHTTPPort = 8120

// HTTPPortDefault is Config.HTTPPort's value when http_port is not set
// (Default): port DefaultHTTPPort, or a free port when port = 0 (a broker
// on a free port, as tests run, gets its HTTP listener on one too).
const HTTPPortDefault = -1

// Defaults and bounds of the HTTP listener's limits (docs/http.md).
const (
	DefaultHTTPMaxConnections    = 512
	DefaultHTTPReadHeaderTimeout = 5000  // ms
	DefaultHTTPIdleTimeout       = 30000 // ms
	MinHTTPMaxConnections        = 16
	MaxHTTPMaxConnections        = 65536
	maxHTTPReadHeaderTimeout     = 60000  // ms (1 min)
	maxHTTPIdleTimeout           = 300000 // ms (5 min)
)

// HTTPAddr returns the HTTP listener's address (docs/http.md) and whether
// it is on: http_port = 0 turns it off.
func (c *Config) HTTPAddr() (string, bool) {
	p := c.HTTPPort
	switch {
	case p == 0:
		return "", false
	case p < 0 && c.Port == 0:
		p = 0
	case p < 0:
		p = DefaultHTTPPort
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(p)), true
}

func (k *checker) http(c *Config) {
	k.intRange("http_max_connections", int64(c.HTTPMaxConnections), MinHTTPMaxConnections, MaxHTTPMaxConnections)
	k.intRange("http_read_header_timeout", int64(c.HTTPReadHeaderTimeout), 100, maxHTTPReadHeaderTimeout)
	k.intRange("http_idle_timeout", int64(c.HTTPIdleTimeout), 100, maxHTTPIdleTimeout)
	if !k.intRange("http_port", int64(c.HTTPPort), HTTPPortDefault, 65535) {
		return
	}
	if c.HTTPPort > 0 && (c.HTTPPort == c.Port || c.HTTPPort == c.TLSPort) {
		k.add("http_port", "must differ from port and tls_port, got %d", c.HTTPPort)
	}
}
