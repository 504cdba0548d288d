package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// TestTransfers runs the example against a real broker and MariaDB: one
// transfer in process, then one killed -9 at each step by -pause (the
// built binary), each followed by a run that recovers it and transfers
// again. After each, the balances and the transfer-done events agree:
// an event exactly for each transfer that moved money.
func TestTransfers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "xa-mysql")
	b, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/metaq-go/metaq/examples/xa-mysql").CombinedOutput()
	require.NoError(t, err, "%s", b)

	br := brokertest.Start(t, brokertest.Topics("transfer-done"), brokertest.Partitions(1), brokertest.Quiet(), smallJournal)
	dsn := testsvc.MariaDB(t)
	cfg := config{addr: br.Addr(), dsn: dsn, logPath: filepath.Join(t.TempDir(), "decisions"), owner: "xa-test",
		topic: "transfer-done", from: 1, to: 2, amount: 10}
	setup := cfg
	setup.init = true
	require.NoError(t, run(ctx, new(bytes.Buffer), setup))
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer db.Close()

	cl, err := client.New(client.Brokers(br.Addr()), client.ConsumeTopics("transfer-done"),
		client.FetchMaxWait(50*time.Millisecond), client.Logger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer cl.Close(context.Background())
	next, stop := iter.Pull2(cl.Messages(ctx))
	defer stop()
	events := 0
	// check reads the events up to a marker and compares them with the
	// balances: done transfers so far.
	check := func(done int) {
		t.Helper()
		marker := fmt.Sprintf("marker-%d", done)
		_, err := cl.ProduceSync(ctx, &message.Message{Topic: "transfer-done", Body: []byte(marker)})
		require.NoError(t, err)
		for {
			m, err, ok := next()
			require.True(t, ok)
			require.NoError(t, err)
			if string(m.Body) == marker {
				break
			}
			var e struct{ Amount int64 }
			require.NoError(t, json.Unmarshal(m.Body, &e), "%s", m.Body)
			require.Equal(t, int64(10), e.Amount)
			events++
		}
		var a, b int64
		require.NoError(t, db.QueryRowContext(ctx, "SELECT balance FROM account WHERE id = 1").Scan(&a))
		require.NoError(t, db.QueryRowContext(ctx, "SELECT balance FROM account WHERE id = 2").Scan(&b))
		require.Equal(t, [3]int64{100 - 10*int64(done), 10 * int64(done), int64(done)}, [3]int64{a, b, int64(events)},
			"balances and events agree")
	}

	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, cfg))
	require.Contains(t, out.String(), "committed ")
	check(1)

	done := 1
	for _, tc := range []struct {
		step      string
		recovered string // what the next run's recovery says
		committed bool   // the paused transfer happened
	}{
		{pauseWorkDone, "recovered: 0 branches committed, 0 rolled back", false},
		{pausePrepared, "recovered: 0 branches committed, 2 rolled back", false},
		{pauseDecided, "recovered: 2 branches committed, 0 rolled back", true},
		{pausePhaseTwo, "recovered: 1 branches committed, 0 rolled back", true},
	} {
		t.Run(tc.step, func(t *testing.T) {
			killAt(t, ctx, db, bin, cfg, tc.step)
			var out bytes.Buffer
			require.NoError(t, run(ctx, &out, cfg))
			require.Contains(t, out.String(), tc.recovered, out.String())
			if tc.committed {
				done++
			}
			done++ // the run's own transfer
			check(done)
		})
	}
}

var pausedRE = regexp.MustCompile(`^paused at (\S+) \(mariadb connection (\d+)\)$`)

// killAt runs the binary with -pause step, kills it -9 once it is there,
// and waits until MariaDB has seen its connection close.
func killAt(t *testing.T, ctx context.Context, db *sql.DB, bin string, c config, step string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "-addr", c.addr, "-dsn", c.dsn, "-log", c.logPath, "-owner", c.owner,
		"-topic", c.topic, "-pause", step)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var id int64
	timeout := time.After(60 * time.Second)
	for id == 0 {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the example exited before pausing")
			if m := pausedRE.FindStringSubmatch(l); m != nil {
				require.Equal(t, step, m[1])
				id, _ = strconv.ParseInt(m[2], 10, 64)
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("the example did not pause in 60 s")
		}
	}
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n))
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "MariaDB still lists connection %d", id)
		time.Sleep(20 * time.Millisecond)
	}
}

// smallJournal gives the brokers 4 MiB journal files, not 64 MiB: a broker
// pre-writes and fdatasyncs its journal file and two spares when it starts,
// and these tests commit far less than one file.
var smallJournal = brokertest.Edit(func(c *conf.Config) { c.JournalFileSize = 4 << 20 })
