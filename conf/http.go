package conf

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultHTTPPort is the HTTP listener's port when http_port is not set:
// 8120, MetaQ's dashboard port.
const DefaultHTTPPort = 8120

// HTTPPortDefault is Config.HTTPPort's value when http_port is not set
// (Default): port − 3, as MetaQ's 8120 is to its 8123, so that brokers
// started from one file with different ports (MetaQ's way to add a
// broker: copy the config, change the id and port) get different HTTP
// ports; DefaultHTTPPort when that is not a port or is tls_port; a free
// port when port = 0 (a broker on a free port, as tests run, gets its HTTP
// listener on one too).
const HTTPPortDefault = -1

// Defaults and bounds of the HTTP listener's limits (docs/http.md).
const (
	DefaultHTTPMaxConnections    = 512
	DefaultHTTPReadHeaderTimeout = 5000  // ms
	DefaultHTTPIdleTimeout       = 30000 // ms
	DefaultHTTPWriteTimeout      = 60000 // ms
	DefaultHTTPEventKeepAlive    = 15000 // ms
	MinHTTPMaxConnections        = 16
	MaxHTTPMaxConnections        = 65536
	maxHTTPReadHeaderTimeout     = 60000  // ms (1 min)
	maxHTTPIdleTimeout           = 300000 // ms (5 min)
	maxHTTPWriteTimeout          = 600000 // ms (10 min)
	maxHTTPEventKeepAlive        = 300000 // ms (5 min)
	// HTTP consumer instances (docs/http.md, "Consumer groups").
	DefaultHTTPConsumerTimeout = 300000 // ms (5 min, as the REST proxy's)
	DefaultHTTPMaxConsumers    = 1000
	maxHTTPConsumerTimeout     = 86400000 // ms (a day)
	maxHTTPMaxConsumers        = 100000
)

// HTTPAddr returns the HTTP listener's address (docs/http.md) and whether
// it is on: http_port = 0 turns it off.
func (c *Config) HTTPAddr() (string, bool) {
	p := c.HTTPPort
	switch {
	case p == 0:
		return "", false
	case p < 0:
		p = c.defaultHTTPPort()
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(p)), true
}

// defaultHTTPPort is the HTTP port when http_port is not set.
func (c *Config) defaultHTTPPort() int {
	switch p := c.Port - 3; {
	case c.Port == 0:
		return 0 // a free port
	case p < 1, p == c.TLSPort:
		return DefaultHTTPPort
	default:
		return p
	}
}

func (k *checker) http(c *Config) {
	k.intRange("http_max_connections", int64(c.HTTPMaxConnections), MinHTTPMaxConnections, MaxHTTPMaxConnections)
	k.intRange("http_read_header_timeout", int64(c.HTTPReadHeaderTimeout), 100, maxHTTPReadHeaderTimeout)
	k.intRange("http_idle_timeout", int64(c.HTTPIdleTimeout), 100, maxHTTPIdleTimeout)
	k.intRange("http_write_timeout", int64(c.HTTPWriteTimeout), 100, maxHTTPWriteTimeout)
	k.intRange("http_event_keepalive", int64(c.HTTPEventKeepAlive), 100, maxHTTPEventKeepAlive)
	k.intRange("http_consumer_timeout", int64(c.HTTPConsumerTimeout), 1000, maxHTTPConsumerTimeout)
	k.intRange("http_max_consumers", int64(c.HTTPMaxConsumers), 1, maxHTTPMaxConsumers)
	if !k.intRange("http_port", int64(c.HTTPPort), HTTPPortDefault, 65535) {
		return
	}
	if c.HTTPPort > 0 && (c.HTTPPort == c.Port || c.HTTPPort == c.TLSPort) {
		k.add("http_port", "must differ from port and tls_port, got %d", c.HTTPPort)
	}
	if p := c.defaultHTTPPort(); c.HTTPPort < 0 && p != 0 && (p == c.Port || p == c.TLSPort) {
		k.add("http_port", "is unset, so it would be %d (port − 3, else 8120), which port or tls_port already uses: set http_port", p)
	}
	if c.Port != 0 && c.Port == c.TLSPort {
		k.add("tls_port", "must differ from port, got %d", c.TLSPort)
	}
	for i, h := range c.HTTPAllowedHosts {
		if !ValidAllowedHost(h) {
			k.add("http_allowed_hosts", "entry %d "+`must be a host name (letters, digits, "-" and "."), an IP address or "*", without scheme or port, got %q`, i, h)
		}
	}
}

// ValidAllowedHost says whether h may be an entry of http_allowed_hosts:
// "*", an IP address, or a DNS name (labels of letters, digits, "-" and
// "_", separated by dots, at most 253 bytes).
func ValidAllowedHost(h string) bool {
	if h == "*" {
		return true
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
