package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

func TestPasswd(t *testing.T) {
	t.Parallel()
	r := cli("s3cret\n", "passwd", "--cost", "4")
	mustOK(t, r, "passwd")
	hash := strings.TrimSpace(r.stdout)
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("s3cret")); err != nil {
		t.Fatalf("passwd printed %q, which does not verify: %v", hash, err)
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte("s3cret\n")) == nil {
		t.Fatal("the newline became part of the password")
	}
	if c, _ := bcrypt.Cost([]byte(hash)); c != 4 {
		t.Fatalf("cost %d, want 4", c)
	}
	if r := cli("", "passwd"); r.code != 1 || !strings.Contains(r.stderr, "empty password") {
		t.Fatalf("empty stdin: exit %d, stderr %q", r.code, r.stderr)
	}
}

// secureCLIBroker runs a TLS-only broker with auth on (user "cli", the
// password s3cret, rights on topic gt and every group); zkAddr, if set,
// registers it in ZooKeeper under root.
func secureCLIBroker(t *testing.T, certs *testsvc.Certs, zkAddr, root string) *broker.Broker {
	t.Helper()
	r := cli("s3cret\n", "passwd", "--cost", "4")
	mustOK(t, r, "passwd")
	cf, kf, _ := certs.Server(t, "server")
	opts := []brokertest.Option{brokertest.Quiet(), brokertest.Topics("gt"), brokertest.TLSOnly(),
		brokertest.TLS(conf.TLS{CertFile: cf, KeyFile: kf, MinVersion: "1.2"}),
		brokertest.Auth(conf.Auth{Enabled: true, FailureDelay: 50, Users: []conf.User{{Name: "cli", PasswordHash: strings.TrimSpace(r.stdout),
			Publish: []string{"gt"}, Subscribe: []string{"gt"}, Groups: []string{"*"}}}})}
	if zkAddr != "" {
		opts = append(opts, brokertest.ZooKeeper(zkAddr, root, 0), brokertest.Edit(func(c *conf.Config) {
			c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 4000, 5000
		}))
	}
	return brokertest.Start(t, append(opts, smallJournal())...).Broker
}

// TestCLITLSAuth produces and consumes with --tls-ca, --user and
// --password-file (or $METAQ_PASSWORD) against a TLS-only broker with auth
// on, directly and through ZooKeeper.
func TestCLITLSAuth(t *testing.T) {
	certs := testsvc.NewCerts(t)
	b := secureCLIBroker(t, certs, "", "")
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sec := []string{"--addr", b.TLSAddr(), "--tls-ca", certs.CAFile, "--user", "cli", "--password-file", pwFile}

	mustOK(t, cli("one\ntwo\nthree\n", append(sec, "produce", "--topic", "gt")...), "produce")
	r := cli("", append(sec, "consume", "--topic", "gt", "--max", "3")...)
	mustOK(t, r, "consume")
	if got := strings.Fields(r.stdout); strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("consume printed %q", r.stdout)
	}
	// The flags may follow the command too; the password may come from
	// the environment.
	t.Setenv(passwordEnv, "s3cret")
	mustOK(t, cli("", "stats", "--addr", b.TLSAddr(), "--tls-ca", certs.CAFile, "--user", "cli"), "stats with $METAQ_PASSWORD")

	t.Run("wrong password", func(t *testing.T) {
		t.Setenv(passwordEnv, "guess")
		r := cli("x\n", "--addr", b.TLSAddr(), "--tls-ca", certs.CAFile, "--user", "cli", "produce", "--topic", "gt")
		if r.code != 1 || !strings.Contains(r.stderr, `refused authentication as user "cli"`) || strings.Contains(r.stderr, "guess") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		r := cli("", "--addr", b.TLSAddr(), "--tls-ca", certs.CAFile, "stats")
		if r.code != 1 || !strings.Contains(r.stderr, "401") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("untrusted broker", func(t *testing.T) {
		other := testsvc.NewCerts(t)
		r := cli("", "--addr", b.TLSAddr(), "--tls-ca", other.CAFile, "--user", "cli", "stats")
		if r.code != 1 || !strings.Contains(r.stderr, "tls") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("usage", func(t *testing.T) {
		os.Unsetenv(passwordEnv)
		if r := cli("", "--addr", b.TLSAddr(), "--user", "cli", "stats"); r.code != 2 || !strings.Contains(r.stderr, "METAQ_PASSWORD") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		if r := cli("", "--addr", b.TLSAddr(), "--tls-cert", pwFile, "stats"); r.code != 2 {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("zookeeper", func(t *testing.T) {
		zkAddr := testsvc.ZooKeeper(t)
		root := "/metaq-cli-tls-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		zb := secureCLIBroker(t, certs, zkAddr, root)
		zsec := []string{"--tls-ca", certs.CAFile, "--user", "cli", "--password-file", pwFile}
		mustOK(t, cli("z1\nz2\n", append(zsec, "--addr", zb.TLSAddr(), "produce", "--topic", "gt")...), "produce")
		r := cli("", append(zsec, "consume", "--zk", zkAddr, "--root", root, "--topic", "gt", "--group", "cli-g", "--max", "2")...)
		mustOK(t, r, "consume --zk")
		if got := strings.Fields(r.stdout); strings.Join(got, ",") != "z1,z2" {
			t.Fatalf("consume --zk printed %q", r.stdout)
		}
	})
}
