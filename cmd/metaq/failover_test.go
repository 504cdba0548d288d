package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestCLIFailoverTLSAuth: `metaq failover` against a TLS-only sync pair
// with [auth] on (in-process brokers, real ZooKeeper). Without TLS flags
// it says the master is TLS-only; as a user without admin it gets the
// broker's 403 and nothing changes; with --tls-ca, --user and
// --password-file of an admin it hands broker 7 over to slave 1.
func TestCLIFailoverTLSAuth(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	certs := testsvc.NewCerts(t)
	root := "/metaq-cli-failover-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	hash := func(pw string) string {
		r := cli(pw+"\n", "passwd", "--cost", "4")
		mustOK(t, r, "passwd")
		return strings.TrimSpace(r.stdout)
	}
	users := []conf.User{
		{Name: "cli", PasswordHash: hash("s3cret"), Publish: []string{"gt"}, Subscribe: []string{"gt"}, Groups: []string{"*"}},
		{Name: "ops", PasswordHash: hash("0ps"), Admin: true},
	}
	member := func(slave int) *brokertest.Broker {
		cf, kf, _ := certs.Server(t, fmt.Sprintf("server-%d", slave+1))
		return brokertest.Start(t, smallJournal(), brokertest.Topics("gt"), brokertest.TLSOnly(),
			brokertest.TLS(conf.TLS{CertFile: cf, KeyFile: kf, MinVersion: "1.2"}),
			brokertest.Auth(conf.Auth{Enabled: true, FailureDelay: 50, Users: users}),
			brokertest.ZooKeeper(zkAddr, root, 7), brokertest.Edit(func(c *conf.Config) {
				c.SlaveID = slave
				c.Failover, c.Replication = true, conf.ReplicationSync
				c.ReplicationUser, c.ReplicationPassword, c.ReplicationTLSCAFile = "ops", "0ps", certs.CAFile
				c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 2000, 5000
			}))
	}
	master, slave := member(-1), member(1)
	dir := t.TempDir()
	pw := func(name, pw string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ops := []string{"--tls-ca", certs.CAFile, "--user", "ops", "--password-file", pw("ops", "0ps")}
	stat := func(addr, name string) string {
		r := cli("", append(ops, "--addr", addr, "stats")...)
		mustOK(t, r, "stats")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("stats has no %s:\n%s", name, r.stdout)
		}
		return m[1]
	}
	deadline := time.Now().Add(20 * time.Second)
	for stat(master.TLSAddr(), "failover_insync") != "s1" {
		if time.Now().After(deadline) {
			t.Fatal("slave 1 not in sync within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	zk := []string{"failover", "--broker-id", "7", "--zk", zkAddr, "--root", root}

	r := cli("", zk...)
	if r.code != 1 || !strings.Contains(r.stderr, "TLS-only (metaqs://): pass --tls-ca") {
		t.Fatalf("no TLS flags: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cli("", append([]string{"--tls-ca", certs.CAFile, "--user", "cli", "--password-file", pw("cli", "s3cret")}, zk...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "403") || !strings.Contains(r.stderr, "admin only") {
		t.Fatalf("non-admin: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := stat(master.TLSAddr(), "failover_role"); got != "master" {
		t.Fatalf("a refused switchover changed the role: %s", got)
	}
	r = cli("", append(ops, zk...)...)
	mustOK(t, r, "failover")
	if !strings.Contains(r.stdout, "slave 1 holds epoch 2") {
		t.Fatalf("failover printed %q", r.stdout)
	}
	if got := stat(slave.TLSAddr(), "failover_role"); got != "master" {
		t.Fatalf("slave 1 after the switchover: failover_role %s", got)
	}
	deadline = time.Now().Add(20 * time.Second)
	for stat(slave.TLSAddr(), "failover_insync") != "s0" {
		if time.Now().After(deadline) {
			t.Fatal("the old master did not rejoin in sync within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
