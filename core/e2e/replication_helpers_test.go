package e2e

// Helpers for the replication tests (replication_test.go): a master and
// its slaves as real metaq-server processes from one config file, in one
// ZooKeeper root of the test (startCluster with no brokers of its own).

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// replConfig is the replication tests' server.toml (the harness appends
// [zookeeper]): small segments, so that copies span several; a
// group-commit topic and a threshold-mode one. Journal files of 4 MiB (as
// the power-loss tests' brokers), not 64: each fresh data directory
// pre-writes and fsyncs three of them.
const replConfig = `broker_id = 0
host = "127.0.0.1"
port = 8123
http_port = 0
data_dir = "data"
num_partitions = 4
max_segment_size = 65536
journal_file_size = 4194304
delete_check_interval = 1

[[topic]]
name = "repl"

[[topic]]
name = "repl-t"
num_partitions = 2
unflush_threshold = 50
unflush_interval = 100
`

// replTopics are replConfig's topics and partition counts.
var replTopics = map[string]int{"repl": 4, "repl-t": 2}

// replNode is one broker process of a replicated broker id: its master
// (Slave -1) or slave Slave. Port and data directory stay across restarts.
type replNode struct {
	c       *testCluster
	ID      int
	Slave   int
	Port    int
	Addr    string
	DataDir string

	// edit, if not nil, makes the node's own config file from the
	// cluster's file text and the node's port at every launch; the node
	// is then started without --port (the edited file has the ports).
	edit func(text string, port int) string

	procs
}

// startRepl starts a master (slave < 0) or slave of broker id on a free
// port with a data directory of its own (dataDir "" makes one).
func startRepl(t testing.TB, c *testCluster, id, slave int, dataDir string) *replNode {
	t.Helper()
	return startReplEdit(t, c, id, slave, dataDir, nil)
}

// startReplEdit is startRepl with a config file of the node's own, made
// by edit from the cluster's (replNode.edit).
func startReplEdit(t testing.TB, c *testCluster, id, slave int, dataDir string, edit func(text string, port int) string) *replNode {
	t.Helper()
	if dataDir == "" {
		dataDir = filepath.Join(c.dir, fmt.Sprintf("b%d-s%d", id, slave))
	}
	n := &replNode{c: c, ID: id, Slave: slave, DataDir: dataDir, edit: edit}
	require.NoError(t, os.MkdirAll(dataDir, 0o755))
	t.Cleanup(func() {
		p, runs := n.current(), n.all()
		if p != nil {
			p.Kill()
		}
		if t.Failed() {
			for i, r := range runs {
				t.Logf("--- %s process %d ---\n%s", n, i+1, r.Logs.Tail(6<<10))
			}
		}
	})
	require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
		n.Port, n.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return n.launch()
	}))
	return n
}

func (n *replNode) String() string {
	if n.Slave < 0 {
		return fmt.Sprintf("master %d", n.ID)
	}
	return fmt.Sprintf("broker %d slave %d", n.ID, n.Slave)
}

func (n *replNode) launch() error {
	config, port := n.c.ConfigPath, []string{"--port", strconv.Itoa(n.Port)}
	if n.edit != nil {
		text, err := os.ReadFile(n.c.ConfigPath)
		if err != nil {
			return err
		}
		config, port = n.DataDir+".toml", nil
		if err := os.WriteFile(config, []byte(n.edit(string(text), n.Port)), 0o600); err != nil {
			return err
		}
	}
	args := append([]string{"--config", config, "--broker-id", strconv.Itoa(n.ID), "--slave-id", strconv.Itoa(n.Slave),
		"--host", "127.0.0.1", "--http-port", "0", "--data-dir", n.DataDir, "--zk", n.c.ZK}, port...)
	p, err := brokertest.Launch(n.c.bin, nil, args...)
	if p != nil {
		n.started(p)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	n.setCurrent(p)
	return nil
}

// kill9 kills the process with SIGKILL and waits until it is reaped.
func (n *replNode) kill9(t testing.TB) {
	t.Helper()
	p := n.current()
	p.Kill()
	select {
	case <-p.Exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not reaped after SIGKILL", n)
	}
}

// stop stops the process cleanly (SIGINT: it unregisters, so a restart
// registers at once).
func (n *replNode) stop(t testing.TB) {
	t.Helper()
	p := n.current()
	p.Stop(t)
}

// restart starts the process again (same port, data, config).
func (n *replNode) restart(t testing.TB) {
	t.Helper()
	require.NoError(t, n.launch())
}

// logContains reports whether the current process logged s.
func (n *replNode) logContains(s string) bool {
	p := n.current()
	return p != nil && strings.Contains(p.Logs.String(), s)
}

// dial connects to the node as the cluster's clients do (testCluster.dial)
// and closes the connection at the end of the test.
func (n *replNode) dial(t testing.TB) *client {
	t.Helper()
	return n.c.dial(t, n.Addr)
}

// stats returns the node's `stats` summary.
func (n *replNode) stats(t testing.TB) map[string]string {
	t.Helper()
	cl := n.dial(t)
	defer cl.close()
	r, err := cl.stats("")
	require.NoError(t, err)
	return parseStats(t, r.Body)
}

// waitCaughtUp waits (at most timeout) until every partition of
// replTopics has the same min and max offsets on slave as on master.
func waitCaughtUp(t testing.TB, master, slave *replNode, timeout time.Duration) {
	t.Helper()
	mc, sc := master.dial(t), slave.dial(t)
	defer mc.close()
	defer sc.close()
	deadline := time.Now().Add(timeout)
	for {
		mo, so := partOffsets(t, mc), partOffsets(t, sc)
		diff := ""
		for topic, n := range replTopics {
			for p := range n {
				k := topic + "-" + strconv.Itoa(p)
				if mo[k] != so[k] {
					diff = fmt.Sprintf("%s: master %v, slave %v", k, mo[k], so[k])
				}
			}
		}
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not catch up with %s within %v: %s", slave, master, timeout, diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// compareCopies checks that slave's copy of every partition of
// replTopics is the master's record for record (offset, msgId, flag,
// data) through get, and that its segment files hold the same bytes
// (the active one up to what the master had when read: both are
// readable to the same end once caught up).
func compareCopies(t testing.TB, master, slave *replNode) (records int) {
	t.Helper()
	mc, sc := master.dial(t), slave.dial(t)
	defer mc.close()
	defer sc.close()
	for topic, n := range replTopics {
		for p := range int32(n) {
			mr, mend, err := readPartition(mc, topic, p, 1<<20)
			require.NoError(t, err)
			sr, send, err := readPartition(sc, topic, p, 1<<20)
			require.NoError(t, err)
			require.Equal(t, mend, send, "%s-%d: end offsets", topic, p)
			require.Equal(t, len(mr), len(sr), "%s-%d: record counts", topic, p)
			for i := range mr {
				if mr[i].Offset != sr[i].Offset || mr[i].ID != sr[i].ID || mr[i].Flag != sr[i].Flag || !bytes.Equal(mr[i].Data, sr[i].Data) {
					t.Fatalf("%s-%d record %d: master {off %d id %d flag %d %q}, slave {off %d id %d flag %d %q}", topic, p, i,
						mr[i].Offset, mr[i].ID, mr[i].Flag, mr[i].Data, sr[i].Offset, sr[i].ID, sr[i].Flag, sr[i].Data)
				}
			}
			records += len(mr)
			compareSegmentFiles(t, filepath.Join(master.DataDir, fmt.Sprintf("%s-%d", topic, p)),
				filepath.Join(slave.DataDir, fmt.Sprintf("%s-%d", topic, p)), mend)
		}
	}
	return records
}

// compareSegmentFiles byte-compares two partition directories as byte
// streams: the segment files of each, chained by their names, hold the
// same bytes from the same first offset up to end. (Segment boundaries may
// differ: a slave rolls its segments by its own max_segment_size.)
func compareSegmentFiles(t testing.TB, mdir, sdir string, end int64) {
	t.Helper()
	// A group-commit broker writes what it put since its last checkpoint
	// at the next one (docs/storage.md, "Segment tails"): wait until both
	// directories' files reach end.
	// (Each segment's tail is written at the checkpoint on its own, so a
	// later segment may be on disk before an earlier one's tail: count
	// only the bytes that chain from the first segment.)
	onDisk := func(dir string) int64 {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return 0
		}
		type seg struct{ start, size int64 }
		var segs []seg
		for _, e := range ents {
			base, ok := strings.CutSuffix(e.Name(), ".meta")
			if !ok || len(base) != 20 {
				continue
			}
			start, err := strconv.ParseInt(base, 10, 64)
			if err != nil {
				continue
			}
			if fi, err := e.Info(); err == nil {
				segs = append(segs, seg{start, fi.Size()})
			}
		}
		sort.Slice(segs, func(i, j int) bool { return segs[i].start < segs[j].start })
		if len(segs) == 0 {
			return 0
		}
		end := segs[0].start
		for _, sg := range segs {
			if sg.start != end {
				break
			}
			end += sg.size
		}
		return end
	}
	require.Eventually(t, func() bool { return onDisk(mdir) >= end && onDisk(sdir) >= end }, 15*time.Second, 10*time.Millisecond,
		"%s and %s reach offset %d on disk", mdir, sdir, end)
	stream := func(dir string) (int64, []byte) {
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		var starts []int64
		files := map[int64]string{}
		for _, e := range ents {
			base, ok := strings.CutSuffix(e.Name(), ".meta")
			if !ok || len(base) != 20 || !e.Type().IsRegular() {
				continue
			}
			start, err := strconv.ParseInt(base, 10, 64)
			require.NoError(t, err)
			starts = append(starts, start)
			files[start] = filepath.Join(dir, e.Name())
		}
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		require.NotEmpty(t, starts, dir)
		var all []byte
		for _, st := range starts {
			require.Equal(t, starts[0]+int64(len(all)), st, "%s: segment %020d does not chain", dir, st)
			b, err := os.ReadFile(files[st])
			require.NoError(t, err)
			all = append(all, b...)
		}
		require.GreaterOrEqual(t, starts[0]+int64(len(all)), end, "%s holds less than offset %d", dir, end)
		return starts[0], all[:end-starts[0]]
	}
	mmin, mb := stream(mdir)
	smin, sb := stream(sdir)
	require.Equal(t, mmin, smin, "%s: first offsets", sdir)
	require.True(t, bytes.Equal(mb, sb), "%s: the bytes of offsets %d..%d differ from the master's", sdir, mmin, end)
}

// putMany puts n messages of varied sizes round-robin over the
// partitions of replTopics on addr, 64 in flight, and checks each is
// acknowledged.
func putMany(t testing.TB, addr string, n int, tag string) {
	t.Helper()
	cl := dial(t, addr)
	defer cl.close()
	topics := []string{"repl", "repl-t"}
	const window = 64
	inflight := 0
	for i := 0; i < n || inflight > 0; {
		if i < n && inflight < window {
			topic := topics[i%2]
			p := int32((i / 2) % replTopics[topic])
			body := fmt.Sprintf("%s-%d-%s", tag, i, strings.Repeat("x", i%300))
			require.NoError(t, cl.write(putFrame(topic, p, []byte(body), cl.nextOpaque())))
			i++
			inflight++
			continue
		}
		r, err := cl.read()
		require.NoError(t, err)
		require.Equal(t, protocol.StatusOK, r.Code, "put: %v", r)
		inflight--
	}
}

// readPartitionRetained is readPartition of a partition whose head
// retention may delete while it reads: a get the broker answers 301 (the
// offset is below the partition's new min) reads again from the start, a
// few times.
func readPartitionRetained(cl *client, topic string, p int32) ([]record, int64, error) {
	for i := 0; ; i++ {
		recs, end, err := readPartition(cl, topic, p, 1<<20)
		if err == nil || i == 4 || !strings.Contains(err.Error(), "result 301") {
			return recs, end, err
		}
	}
}

// waitReadable waits (at most 10 s) until addr serves want records in all
// of replTopics: threshold-mode puts are acknowledged before the flush
// that makes them readable.
func waitReadable(t testing.TB, addr string, want int) {
	t.Helper()
	cl := dial(t, addr)
	defer cl.close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for topic, parts := range replTopics {
			for p := range int32(parts) {
				recs, _, err := readPartitionRetained(cl, topic, p)
				require.NoError(t, err)
				n += len(recs)
			}
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s serves %d records, want %d", addr, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
