package conf

import (
	"crypto/tls"
	"fmt"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"
)

// Defaults of the connection limits (see Config).
const (
	DefaultMaxConnections       = 10000
	DefaultIdleTimeout          = 600000 // ms (10 min)
	DefaultRequestTimeout       = 30000  // ms
	DefaultMaxBufferedBytes     = 256 << 20
	DefaultMaxGroupMembers      = 1000
	DefaultMaxMembershipsPerCon = 64
	DefaultAuthFailureDelay     = 1000 // ms
	DefaultAuthMaxFailures      = 5
	DefaultAuthLockout          = 1000   // ms
	DefaultAuthMaxLockout       = 60000  // ms
	DefaultAuthFailureWindow    = 900000 // ms (15 min)
	minBufferedBytes            = 1 << 20
)

// Auth is the [auth] table: SASL PLAIN users and their rights. Auth is off
// unless Enabled is true; then every command but version, auth and quit
// needs an authenticated connection (docs/security.md).
type Auth struct {
	// Enabled turns authentication and authorization on.
	Enabled bool `toml:"enabled"`
	// FailureDelay is how long, in milliseconds, a failed auth waits before
	// its reply (0..60000). Default 1000.
	FailureDelay int `toml:"failure_delay"`
	// MaxFailures is how many failed logins, counted per user, per source
	// address and per user from a source across every connection and the
	// HTTP listener, lock further attempts (0..1000; 0 turns the limiter
	// off). Default 5 (docs/security.md, "Password guessing").
	MaxFailures int `toml:"max_failures"`
	// Lockout is the first lock in milliseconds; each further failure
	// doubles it, up to MaxLockout. Default 1000.
	Lockout int `toml:"lockout"`
	// MaxLockout caps a lock, in milliseconds. Default 60000.
	MaxLockout int `toml:"max_lockout"`
	// FailureWindow is how long, in milliseconds, failures are kept
	// without a new one. Default 900000 (15 min).
	FailureWindow int `toml:"failure_window"`
	// Users are the [[auth.user]] tables.
	Users []User `toml:"user"`
}

// User is one [[auth.user]] table. Publish, Subscribe and Groups are lists
// of names where a trailing "*" matches any suffix ("orders*") and "*"
// alone matches everything.
type User struct {
	// Name is the SASL PLAIN user name, or the CN of an mTLS client
	// certificate.
	Name string `toml:"name"`
	// PasswordHash is a bcrypt hash (`metaq passwd`); empty means the user
	// can only log in with a client certificate.
	PasswordHash string `toml:"password_hash" secret:"true"`
	// Publish are the topics the user may put to.
	Publish []string `toml:"publish"`
	// Subscribe are the topics the user may get from and read offsets of.
	Subscribe []string `toml:"subscribe"`
	// Groups are the consumer groups the user may commit, fetch and join.
	Groups []string `toml:"groups"`
	// Admin grants the admin commands (stats config, stats reset, ...) and
	// every topic and group.
	Admin bool `toml:"admin"`
}

// TLS is the [tls] table. TLS is on when CertFile is set; TLSPort then
// gives the TLS listener (and Port = 0 turns plaintext off).
type TLS struct {
	// CertFile and KeyFile are the broker's PEM certificate chain and key.
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
	// ClientCAFile, when set, is the PEM bundle client certificates are
	// verified against (mTLS). A verified certificate's CN names the user.
	ClientCAFile string `toml:"client_ca_file"`
	// RequireClientCert refuses TLS clients without a verified certificate
	// (needs ClientCAFile). Default false: a certificate may be given.
	RequireClientCert bool `toml:"require_client_cert"`
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string `toml:"min_version"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// MinTLSVersion returns MinVersion as a crypto/tls constant.
func (t TLS) MinTLSVersion() uint16 {
	if t.MinVersion == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// UserByName returns the [[auth.user]] named name.
func (a *Auth) UserByName(name string) (*User, bool) {
	for i := range a.Users {
		if a.Users[i].Name == name {
			return &a.Users[i], true
		}
	}
	return nil, false
}

// MatchName reports whether name matches one of the patterns: an exact
// name, a prefix ending in "*", or "*".
func MatchName(patterns []string, name string) bool {
	for _, p := range patterns {
		if p == name || p == "*" || strings.HasSuffix(p, "*") && strings.HasPrefix(name, p[:len(p)-1]) {
			return true
		}
	}
	return false
}

// CanPublish, CanSubscribe and CanUseGroup are the user's rights; an admin
// has them all.
func (u *User) CanPublish(topic string) bool   { return u.Admin || MatchName(u.Publish, topic) }
func (u *User) CanSubscribe(topic string) bool { return u.Admin || MatchName(u.Subscribe, topic) }
func (u *User) CanUseGroup(group string) bool  { return u.Admin || MatchName(u.Groups, group) }

var (
	authFields = tagIndex(reflect.TypeOf(Auth{}))
	userFields = tagIndex(reflect.TypeOf(User{}))
	tlsFields  = tagIndex(reflect.TypeOf(TLS{}))
)

func (d *decoder) decodeAuth(c *Config, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		d.add("auth", "must be a table ([auth]), got %s", tomlType(v))
		return
	}
	if uv, ok := m["user"]; ok {
		m = without(m, "user")
		c.Auth.Users = decodeTables[User](d, "auth.user", "auth.user", uv, userFields)
	}
	d.decodeTable("auth", m, reflect.ValueOf(&c.Auth).Elem(), authFields, "auth")
}

func (k *checker) security(c *Config) {
	k.min("max_connections", int64(c.MaxConnections), 1)
	k.min("idle_timeout", int64(c.IdleTimeout), 0)
	k.min("request_timeout", int64(c.RequestTimeout), 100)
	k.min("max_buffered_bytes", c.MaxBufferedBytes, minBufferedBytes)
	k.min("max_group_members", int64(c.MaxGroupMembers), 1)
	k.min("max_memberships_per_connection", int64(c.MaxMembershipsPerConnection), 1)
	k.intRange("tls_port", int64(c.TLSPort), 0, 65535)
	k.connLimits(c) // connlimits.go

	t := &c.TLS
	if t.Enabled() {
		if t.KeyFile == "" {
			k.add("tls.key_file", "is required with tls.cert_file")
		}
		if c.TLSPort == 0 {
			k.add("tls_port", "must be set (1..65535) when [tls] has a cert_file")
		}
	} else if t.KeyFile != "" || t.ClientCAFile != "" {
		k.add("tls.cert_file", "is required with tls.key_file or tls.client_ca_file")
	} else if c.TLSPort != 0 {
		k.add("tls_port", "needs [tls] cert_file and key_file")
	}
	if t.RequireClientCert && t.ClientCAFile == "" {
		k.add("tls.require_client_cert", "needs tls.client_ca_file")
	}
	switch t.MinVersion {
	case "", "1.2", "1.3":
	default:
		k.add("tls.min_version", `must be "1.2" or "1.3", got %q`, t.MinVersion)
	}

	a := &c.Auth
	k.intRange("auth.failure_delay", int64(a.FailureDelay), 0, 60000)
	k.intRange("auth.max_failures", int64(a.MaxFailures), 0, 1000)
	if k.intRange("auth.lockout", int64(a.Lockout), 0, 3600000) && a.MaxFailures > 0 && a.Lockout == 0 {
		k.add("auth.lockout", "must be >= 1 when max_failures is set, got 0")
	}
	if k.intRange("auth.max_lockout", int64(a.MaxLockout), 0, 3600000) && a.MaxLockout < a.Lockout {
		k.add("auth.max_lockout", "must be >= auth.lockout (%d), got %d", a.Lockout, a.MaxLockout)
	}
	if k.intRange("auth.failure_window", int64(a.FailureWindow), 0, 86400000) && a.FailureWindow < a.MaxLockout {
		k.add("auth.failure_window", "must be >= auth.max_lockout (%d), got %d", a.MaxLockout, a.FailureWindow)
	}
	seen := map[string]int{}
	for i := range a.Users {
		u := &a.Users[i]
		p := fmt.Sprintf("auth.user[%d].", i)
		switch {
		case u.Name == "":
			k.add(p+"name", "is required")
		case strings.ContainsAny(u.Name, "\x00\r\n ") || len(u.Name) > 255:
			k.add(p+"name", "must be 1..255 bytes without spaces, NUL, CR or LF")
		default:
			if j, dup := seen[u.Name]; dup {
				k.add(p+"name", "duplicate user %q (first declared as auth.user[%d])", u.Name, j)
			}
			seen[u.Name] = i
		}
		if u.PasswordHash != "" && !strings.HasPrefix(u.PasswordHash, "$2") {
			k.add(p+"password_hash", "must be a bcrypt hash (make one with `metaq passwd`)")
		}
		for _, list := range []struct {
			key string
			v   []string
		}{{"publish", u.Publish}, {"subscribe", u.Subscribe}, {"groups", u.Groups}} {
			for j, pat := range list.v {
				if bad := badPattern(pat); bad != "" {
					k.add(fmt.Sprintf("%s%s[%d]", p, list.key, j), "%s, got %q", bad, pat)
				}
			}
		}
	}
	if a.Enabled && len(a.Users) == 0 {
		k.add("auth.user", "at least one [[auth.user]] is required when auth is enabled")
	}

	z := &c.ZooKeeper
	if (z.AuthUser == "") != (z.AuthPassword == "") {
		k.add("zookeeper.auth_user", "auth_user and auth_password go together")
	}
	if strings.Contains(z.AuthUser, ":") {
		k.add("zookeeper.auth_user", "must not contain ':'")
	}
}

// badPattern says what is wrong with an ACL pattern, or "".
func badPattern(p string) string {
	switch {
	case p == "":
		return "must not be empty"
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return `"*" may only end a pattern`
	}
	return ""
}

// Redacted is the placeholder that replaces a secret in Redacted's output.
const Redacted = "<redacted>"

// Redacted returns the effective configuration (flags applied) as TOML,
// with every field the schema marks `secret:"true"` replaced by
// "<redacted>": for a KEY=VALUE list (env) only the values, for a table of
// strings (plugin config) every value. It is what `stats config` serves.
func (c *Config) Redacted() []byte {
	cp := reflect.New(reflect.TypeOf(*c)).Elem()
	redactInto(cp, reflect.ValueOf(c).Elem(), false)
	var b strings.Builder
	if err := toml.NewEncoder(&b).Encode(cp.Interface()); err != nil {
		return []byte("# cannot render the configuration: " + err.Error() + "\n")
	}
	return []byte(b.String())
}

// redactInto copies src into dst (same type), redacting secret fields;
// secret says src itself is marked secret.
func redactInto(dst, src reflect.Value, secret bool) {
	switch src.Kind() {
	case reflect.Struct:
		t := src.Type()
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() {
				continue
			}
			redactInto(dst.Field(i), src.Field(i), t.Field(i).Tag.Get("secret") == "true")
		}
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		redactInto(p.Elem(), src.Elem(), secret)
		dst.Set(p)
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := 0; i < src.Len(); i++ {
			if secret && src.Index(i).Kind() == reflect.String {
				v := src.Index(i).String()
				if k, _, ok := strings.Cut(v, "="); ok {
					s.Index(i).SetString(k + "=" + Redacted)
				} else {
					s.Index(i).SetString(Redacted)
				}
				continue
			}
			redactInto(s.Index(i), src.Index(i), secret)
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for _, k := range src.MapKeys() {
			v := src.MapIndex(k)
			if secret && v.Kind() == reflect.String {
				v = reflect.ValueOf(Redacted).Convert(v.Type())
			}
			m.SetMapIndex(k, v)
		}
		dst.Set(m)
	case reflect.String:
		if secret && src.String() != "" {
			dst.SetString(Redacted)
			return
		}
		dst.Set(src)
	default:
		dst.Set(src)
	}
}
