package conf

// The limits on connections that have not authenticated (auth_timeout,
// max_unauthenticated_connections, max_unauthenticated_per_address;
// docs/security.md).

// DefaultAuthTimeout is auth_timeout's default, in milliseconds.
const DefaultAuthTimeout = 5000

// maxAuthTimeout bounds auth_timeout (1 hour).
const maxAuthTimeout = 3600000

// UnauthLimits returns the effective caps on unauthenticated connections:
// in all, and per source address, with 0 (auto) resolved.
func (c *Config) UnauthLimits() (total, perAddress int) {
	total = c.MaxUnauthenticatedConnections
	if total <= 0 {
		total = max(1, c.MaxConnections/10)
	}
	perAddress = c.MaxUnauthenticatedPerAddress
	if perAddress <= 0 {
		perAddress = max(1, total/10)
	}
	return total, min(perAddress, total)
}

func (k *checker) connLimits(c *Config) {
	k.intRange("auth_timeout", int64(c.AuthTimeout), 0, maxAuthTimeout)
	k.min("max_unauthenticated_connections", int64(c.MaxUnauthenticatedConnections), 0)
	k.min("max_unauthenticated_per_address", int64(c.MaxUnauthenticatedPerAddress), 0)
	if n := c.MaxUnauthenticatedConnections; n > 0 && c.MaxConnections >= 1 && n > c.MaxConnections-1 {
		k.add("max_unauthenticated_connections", "must be below max_connections (at most %d, so that a slot remains for an authenticated client), got %d; 0 = auto: max_connections/10",
			c.MaxConnections-1, n)
	}
	if n := c.MaxUnauthenticatedPerAddress; n > 0 && c.MaxConnections >= 1 {
		total, _ := c.UnauthLimits()
		switch {
		case n > c.MaxConnections-1:
			k.add("max_unauthenticated_per_address", "must be below max_connections (at most %d), got %d; 0 = auto", c.MaxConnections-1, n)
		case n > total:
			k.add("max_unauthenticated_per_address", "must be at most max_unauthenticated_connections (%d here), got %d; 0 = auto: a tenth of it", total, n)
		}
	}
}
