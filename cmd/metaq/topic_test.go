package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestCLITopic creates, alters and deletes a topic with `metaq topic`
// through a real broker's admin API.
func TestCLITopic(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP())
	at := []string{"--addr", b.Addr(), "--http", b.HTTPAddr()}
	r := cli("", append(at, "topic", "create", "live", "--partitions", "3")...)
	mustOK(t, r, "topic create")
	if !strings.Contains(r.stdout, "created topic live with 3 partition(s)") {
		t.Fatalf("create printed %q", r.stdout)
	}
	mustOK(t, cli("a\nb\n", "--addr", b.Addr(), "produce", "--topic", "live"), "produce to the new topic")
	if r := cli("", append(at, "topic", "create", "live")...); r.code != 1 || !strings.Contains(r.stderr, "409: topic exists: live") {
		t.Fatalf("create again: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cli("", append(at, "topic", "alter", "live", "--partitions", "5")...)
	mustOK(t, r, "topic alter")
	if !strings.Contains(r.stdout, "now has 5 partition(s) (was 3)") || !strings.Contains(r.stderr, "WARNING: if messages are partitioned by key") {
		t.Fatalf("alter: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := cli("", append(at, "topic", "alter", "live", "--partitions", "2")...); r.code != 1 || !strings.Contains(r.stderr, "removing partitions is not supported") {
		t.Fatalf("alter down: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cli("", append(at, "topic", "alter", "live")...); r.code != 2 {
		t.Fatalf("alter without --partitions: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cli("", append(at, "topic", "delete", "live")...)
	if r.code != 1 || !strings.Contains(r.stderr, "would delete topic live and all its messages; repeat with --yes") {
		t.Fatalf("delete without --yes: exit %d, stderr %q", r.code, r.stderr)
	}
	mustOK(t, cli("", append(at, "topic", "delete", "live", "--yes")...), "topic delete")
	if _, err := os.Stat(filepath.Join(b.Config.DataDir, "live-0")); !os.IsNotExist(err) {
		t.Fatalf("live-0 still there: %v", err)
	}
	if r := cli("", append(at, "topic", "delete", "live", "--yes")...); r.code != 1 || !strings.Contains(r.stderr, "404") {
		t.Fatalf("delete again: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cli("", "--addr", b.Addr(), "--http", "127.0.0.1:1", "topic", "create", "x"); r.code != 1 || !strings.Contains(r.stderr, "admin API at http://127.0.0.1:1") {
		t.Fatalf("no API there: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestCLITopicNamedBroker: without --http, the topic commands act on the
// broker at --addr, which reports its admin API address, even when two
// brokers share a host; a dead --addr and a broker without HTTP are errors
// (issue 23: the address was guessed as --addr's host and port 8120, so a
// topic was created on another broker, or "created" with nothing there).
func TestCLITopicNamedBroker(t *testing.T) {
	t.Parallel()
	b1 := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP())
	b2 := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP())
	mustOK(t, cli("", "--addr", b2.Addr(), "topic", "create", "only-on-2", "--partitions", "2"), "topic create on broker 2")
	has := func(b *brokertest.Broker, topic string) bool {
		_, err := os.Stat(filepath.Join(b.Config.DataDir, topic+"-0"))
		return err == nil
	}
	if !has(b2, "only-on-2") {
		t.Fatal("broker 2 has no topic only-on-2")
	}
	if has(b1, "only-on-2") {
		t.Fatal("the topic was created on broker 1")
	}
	mustOK(t, cli("", "--addr", b2.Addr(), "topic", "delete", "only-on-2", "--yes"), "topic delete on broker 2")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if r := cli("", "--addr", dead, "--timeout", "2s", "topic", "create", "x"); r.code != 1 || !strings.Contains(r.stderr, "cannot reach the broker at "+dead) {
		t.Fatalf("dead --addr: exit %d, stderr %q", r.code, r.stderr)
	}
	noHTTP := brokertest.Start(t, smallJournal(), brokertest.Quiet())
	if r := cli("", "--addr", noHTTP.Addr(), "topic", "create", "x"); r.code != 1 || !strings.Contains(r.stderr, "serves no admin API (http_port = 0") {
		t.Fatalf("broker without HTTP: exit %d, stderr %q", r.code, r.stderr)
	}
	// --http still names the API directly.
	mustOK(t, cli("", "--addr", noHTTP.Addr(), "--http", b1.HTTPAddr(), "topic", "create", "via-http"), "--http override")
	if !has(b1, "via-http") {
		t.Fatal("--http: broker 1 has no topic via-http")
	}
}

// TestCLITopicTLSAuth: over HTTPS with --tls-ca and basic auth from
// --user: a non-admin is refused (403), no credentials 401, an admin may.
func TestCLITopicTLSAuth(t *testing.T) {
	certs := testsvc.NewCerts(t)
	hash := strings.TrimSpace(mustHash(t, "s3cret"))
	cf, kf, _ := certs.Server(t, "server")
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP(), brokertest.TLS(conf.TLS{CertFile: cf, KeyFile: kf, MinVersion: "1.2"}),
		brokertest.Auth(conf.Auth{Enabled: true, FailureDelay: 50, Users: []conf.User{
			{Name: "cli", PasswordHash: hash, Publish: []string{"*"}},
			{Name: "boss", PasswordHash: hash, Admin: true},
		}}))
	t.Setenv(passwordEnv, "s3cret")
	at := []string{"--addr", b.Addr(), "--http", b.HTTPAddr(), "--tls-ca", certs.CAFile}
	if r := cli("", append(at, "--user", "cli", "topic", "create", "x")...); r.code != 1 || !strings.Contains(r.stderr, `403: user "cli" may not POST /api/v1/topics (admin only)`) {
		t.Fatalf("non-admin: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := cli("", append(at, "topic", "create", "x")...); r.code != 1 || !strings.Contains(r.stderr, "401: authentication required") {
		t.Fatalf("no user: exit %d, stderr %q", r.code, r.stderr)
	}
	mustOK(t, cli("", append(at, "--user", "boss", "topic", "create", "x", "--partitions", "2")...), "admin create")
}

func mustHash(t *testing.T, pw string) string {
	t.Helper()
	r := cli(pw+"\n", "passwd", "--cost", "4")
	mustOK(t, r, "passwd")
	return r.stdout
}
