package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/metaq-go/metaq/internal/tlsio"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// passwordEnv is the environment variable that may hold the --user's
// password (instead of --password-file).
const passwordEnv = "METAQ_PASSWORD"

// security is the connection security the global flags ask for: TLS
// (--tls-ca, --tls-cert, --tls-key) and SASL PLAIN (--user with
// --password-file or $METAQ_PASSWORD). Every broker connection of the CLI
// uses it: the SDK's through options, the raw ones through dial.
type security struct {
	caFile, certFile, keyFile string
	user, passwordFile        string

	once     sync.Once
	err      error
	tls      *tls.Config // nil: plaintext
	password string
}

// addFlags registers the security flags on fs.
func (s *security) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.caFile, "tls-ca", s.caFile, "connect with TLS, trusting the CA certificates in this PEM `file`")
	fs.StringVar(&s.certFile, "tls-cert", s.certFile, "connect with TLS, presenting this client certificate (PEM `file`; needs --tls-key)")
	fs.StringVar(&s.keyFile, "tls-key", s.keyFile, "the client certificate's private key (PEM `file`)")
	fs.StringVar(&s.user, "user", s.user, "authenticate as this `user` (SASL PLAIN; password from --password-file or $"+passwordEnv+")")
	fs.StringVar(&s.passwordFile, "password-file", s.passwordFile, "read the --user's password from the first line of this `file`")
}

// tlsOn reports whether the flags ask for TLS (after prepare).
func (s *security) tlsOn() bool { return s != nil && s.tls != nil }

// prepare loads the files the flags name, once. A nil *security is
// plaintext without auth.
func (s *security) prepare() error {
	if s == nil {
		return nil
	}
	s.once.Do(func() { s.err = s.load() })
	return s.err
}

func (s *security) load() error {
	if s.caFile != "" || s.certFile != "" || s.keyFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.caFile != "" {
			pem, err := os.ReadFile(s.caFile)
			if err != nil {
				return fmt.Errorf("--tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--tls-ca %s: no PEM certificate in it", s.caFile)
			}
		}
		if (s.certFile == "") != (s.keyFile == "") {
			return usagef("--tls-cert and --tls-key go together")
		}
		if s.certFile != "" {
			cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
			if err != nil {
				return fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		s.tls = cfg
	}
	switch {
	case s.passwordFile != "":
		if s.user == "" {
			return usagef("--password-file needs --user")
		}
		b, err := os.ReadFile(s.passwordFile)
		if err != nil {
			return fmt.Errorf("--password-file: %w", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		s.password = strings.TrimSuffix(line, "\r")
	case s.user != "":
		v, ok := os.LookupEnv(passwordEnv)
		if !ok {
			return usagef("--user needs --password-file or $%s", passwordEnv)
		}
		s.password = v
	}
	return nil
}

// clientOpts returns sec's options of a client.Client.
func (s *security) clientOpts() []client.Opt {
	if s == nil || s.prepare() != nil {
		return nil
	}
	var out []client.Opt
	if s.tls != nil {
		out = append(out, client.DialTLS(s.tls))
	}
	if s.user != "" {
		out = append(out, client.SASLPlain(s.user, s.password))
	}
	return out
}

// dial connects to the broker at addr as the flags say: TCP, then TLS,
// then `auth PLAIN`; a refused auth is an error naming the user.
func (s *security) dial(ctx context.Context, addr string) (net.Conn, error) {
	if err := s.prepare(); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nc, nil
	}
	if s.tls != nil {
		cfg := s.tls.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		tc := tls.Client(tlsio.BufferReads(nc), cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	if s.user != "" {
		if err := s.authenticate(ctx, nc, addr); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return nc, nil
}

// authenticate runs the SASL PLAIN exchange on a new connection. The
// broker sends nothing but the one reply, so the decoder used here holds
// no bytes of later replies.
func (s *security) authenticate(ctx context.Context, nc net.Conn, addr string) error {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
		defer nc.SetDeadline(time.Time{})
	}
	if _, err := nc.Write(protocol.AppendAuthPlain(nil, s.user, s.password, 1)); err != nil {
		return err
	}
	dec := protocol.NewDecoder(nc, protocol.Limits{MaxLine: 4096, MaxBody: 64 << 10})
	var r protocol.Request
	if err := dec.Decode(&r); err != nil {
		return fmt.Errorf("authenticate with %s: %w", addr, err)
	}
	switch {
	case r.Op != protocol.OpResult:
		return fmt.Errorf("authenticate with %s: unexpected %s frame", addr, r.Op)
	case r.Code == protocol.StatusUnauthorized:
		return &client.AuthError{Addr: addr, User: s.user, Msg: string(r.Body)}
	case r.Code != protocol.StatusOK:
		return fmt.Errorf("authenticate with %s: broker replied %d: %s", addr, r.Code, r.Body)
	}
	return nil
}

const passwdHelp = `
Read a password on stdin and print its bcrypt hash, for password_hash in
an [[auth.user]] table of server.toml. On a terminal the password is read
twice without echo; otherwise the first line of stdin is the password.

example:
  metaq passwd
  echo -n 's3cret' | metaq passwd
`

func cmdPasswd(e *env) *cobra.Command {
	return leaf(e, "passwd", "passwd [--cost N]", passwdHelp, func(fs *pflag.FlagSet) func(args []string) error {
		cost := fs.Int("cost", bcrypt.DefaultCost, fmt.Sprintf("bcrypt cost (%d..%d)", bcrypt.MinCost, bcrypt.MaxCost))
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			if *cost < bcrypt.MinCost || *cost > bcrypt.MaxCost {
				return usagef("--cost must be %d..%d", bcrypt.MinCost, bcrypt.MaxCost)
			}
			pw, err := readPassword(e)
			if err != nil {
				return err
			}
			if len(pw) == 0 {
				return errors.New("empty password")
			}
			if len(pw) > 72 {
				return errors.New("password longer than 72 bytes (bcrypt's limit)")
			}
			h, err := bcrypt.GenerateFromPassword(pw, *cost)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\n", h)
			return nil
		}
	})
}

// readPassword reads the password: without echo, twice, from a terminal;
// else the first line of stdin.
func readPassword(e *env) ([]byte, error) {
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(e.stderr, "Password: ")
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return nil, err
		}
		fmt.Fprint(e.stderr, "Again: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return nil, err
		}
		if string(a) != string(b) {
			return nil, errors.New("the passwords differ")
		}
		return a, nil
	}
	line, err := bufio.NewReader(io.LimitReader(e.stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return []byte(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")), nil
}
