package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestAsyncSlave: a slave started empty copies every partition of its
// master with the master's offsets and msgIds (records and segment bytes
// compared), registers MetaQ's slave nodes, refuses puts, keeps up with
// puts made while it runs, resumes from its own end after kill -9, and a
// second slave started from a partial copy catches up too.
func TestAsyncSlave(t *testing.T) {
	c := startCluster(t, clusterSpec{Config: replConfig})
	master := startRepl(t, c, 1, -1, "")
	putMany(t, master.Addr, 3000, "before")
	waitReadable(t, master.Addr, 3000)

	slave := startRepl(t, c, 1, 1, "")
	waitCaughtUp(t, master, slave, 20*time.Second)
	n := compareCopies(t, master, slave)
	require.Equal(t, 3000, n)

	t.Run("registration", func(t *testing.T) {
		uri := "meta://" + slave.Addr
		data, st, err := c.zk.Get(zkpath.Slave(c.Root, 1, 1))
		require.NoError(t, err)
		require.Equal(t, uri, string(data))
		require.NotZero(t, st.EphemeralOwner)
		data, _, err = c.zk.Get(zkpath.Broker(c.Root, 1))
		require.NoError(t, err)
		require.Equal(t, "meta://"+master.Addr, string(data), "ids/<id> keeps the master's URI")
		name := zkpath.BrokerName{ID: 1, Slave: 1}
		for topic, parts := range replTopics {
			js := fmt.Sprintf(`{"numParts":%d,"broker":"1-s1"}`, parts)
			for kind, want := range map[zkpath.Kind]string{zkpath.Topics: strconv.Itoa(parts), zkpath.TopicsPub: js, zkpath.TopicsSub: js} {
				data, st, err := c.zk.Get(kind.Node(c.Root, topic, name))
				require.NoError(t, err, "%s %s", kind, topic)
				require.Equal(t, want, string(data))
				require.NotZero(t, st.EphemeralOwner)
			}
		}
		s := slave.stats(t)
		require.Equal(t, "true", s["slave"])
		require.Equal(t, "1", s["slave_id"])
		require.Equal(t, master.Addr, s["slave_master"])
		require.Equal(t, "false", master.stats(t)["slave"])
	})

	t.Run("refuses puts", func(t *testing.T) {
		cl := dial(t, slave.Addr)
		defer cl.close()
		r, err := cl.put("repl", 0, []byte("x"))
		require.NoError(t, err)
		require.Equal(t, protocol.StatusForbidden, r.Code)
		cause, _ := protocol.ParseCause(string(r.Body))
		require.Equal(t, protocol.CauseReadOnly, cause, "%s", r.Body)
	})

	t.Run("copies while running", func(t *testing.T) {
		putMany(t, master.Addr, 2000, "during")
		waitReadable(t, master.Addr, 5000)
		waitCaughtUp(t, master, slave, 20*time.Second)
		require.Equal(t, 5000, compareCopies(t, master, slave))
	})

	t.Run("resumes after kill -9", func(t *testing.T) {
		slave.kill9(t)
		putMany(t, master.Addr, 1000, "while-down")
		waitReadable(t, master.Addr, 6000)
		slave.restart(t)
		waitCaughtUp(t, master, slave, 20*time.Second)
		require.Equal(t, 6000, compareCopies(t, master, slave))
		require.False(t, slave.logContains("is empty; starting at"), "a restarted slave resumes from its own end")
	})

	t.Run("partial copy", func(t *testing.T) {
		// Slave 2 starts from slave 1's data cut short: each partition's
		// last segment loses its second half (cut mid-record, which
		// recovery trims), and the last segment of repl-0 goes entirely.
		slave.kill9(t)
		dir := filepath.Join(c.dir, "b1-s2")
		require.NoError(t, os.CopyFS(dir, os.DirFS(slave.DataDir)))
		for topic, parts := range replTopics {
			for p := range parts {
				pdir := filepath.Join(dir, fmt.Sprintf("%s-%d", topic, p))
				ents, err := os.ReadDir(pdir)
				require.NoError(t, err)
				var segs []string
				for _, e := range ents {
					if filepath.Ext(e.Name()) == ".meta" {
						segs = append(segs, e.Name())
					}
				}
				require.NotEmpty(t, segs)
				last := filepath.Join(pdir, segs[len(segs)-1])
				if topic == "repl" && p == 0 && len(segs) > 1 {
					require.NoError(t, os.Remove(last))
					continue
				}
				fi, err := os.Stat(last)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(last, fi.Size()/2+7))
			}
		}
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "journal")))
		slave.restart(t)
		slave2 := startRepl(t, c, 1, 2, dir)
		putMany(t, master.Addr, 500, "partial")
		waitReadable(t, master.Addr, 6500)
		waitCaughtUp(t, master, slave2, 20*time.Second)
		waitCaughtUp(t, master, slave, 20*time.Second)
		require.Equal(t, 6500, compareCopies(t, master, slave2))
		require.Equal(t, 6500, compareCopies(t, master, slave))
	})
}
