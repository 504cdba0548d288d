package registry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
)

// TestConsumerOffsets reads MetaQ's consumer offsets from a real
// ZooKeeper: this broker's partitions only, the topics asked for, bad data
// and unreadable (ACL) nodes said per group, owner-only groups marked, and
// the limits cut the reading short.
func TestConsumerOffsets(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/offsets-%d", time.Now().UnixNano())
	c := client(t, addr)
	mk := func(path, data string, acl []zk.ACL) {
		t.Helper()
		parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
		for i := 1; i < len(parts); i++ {
			if _, err := c.Create("/"+strings.Join(parts[:i], "/"), nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
				require.NoError(t, err)
			}
		}
		_, err := c.Create(path, []byte(data), 0, acl)
		require.NoError(t, err)
	}
	open := zk.WorldACL(zk.PermAll)
	mk(zkpath.Offset(root, "a", "both", 5, 0), "3-100", open)
	mk(zkpath.Offset(root, "a", "both", 5, 3), "250", open) // before MetaQ 1.4: the offset alone
	mk(zkpath.Offset(root, "a", "both", 5, 9), "1-9", open) // past the partition count
	mk(zkpath.Offset(root, "a", "both", 6, 1), "1-1", open) // another broker's
	mk(zkpath.Offset(root, "a", "gone", 5, 0), "1-1", open) // not asked for
	mk(zkpath.Owner(root, "b", "both", 5, 1), "b_x", open)  // owners, offsets elsewhere
	mk(zkpath.Offset(root, "c", "both", 5, 2), "x-y", open)
	mk(zkpath.Offset(root, "d", "both", 5, 0), "1-1", zk.DigestACL(zk.PermAll, "someone", "secret"))

	r := openAt(t, addr, root)
	topics := map[string]int{"both": 4, "subonly": 2}
	got, truncated, err := r.ConsumerOffsets(5, topics, OffsetLimits{MaxGroups: 100, MaxReads: 1000})
	require.NoError(t, err)
	require.False(t, truncated)
	require.Len(t, got, 4, "%+v", got)
	a, b, cc, d := got[0], got[1], got[2], got[3]
	require.Equal(t, "a", a.Group)
	require.Equal(t, "both", a.Topic)
	require.Len(t, a.Offsets, 4)
	require.Equal(t, int64(100), a.Offsets[0].Offset)
	require.Positive(t, a.Offsets[0].MTime)
	require.Equal(t, int64(-1), a.Offsets[1].Offset)
	require.Equal(t, int64(250), a.Offsets[3].Offset)
	require.False(t, a.Owned)
	require.Empty(t, a.Err)
	require.Equal(t, "b", b.Group)
	require.True(t, b.Owned)
	require.Equal(t, int64(-1), b.Offsets[1].Offset)
	require.Equal(t, "c", cc.Group)
	require.Contains(t, cc.Err, `"x-y"`)
	require.Equal(t, "d", d.Group)
	require.Contains(t, d.Err, "ACL")

	// Limits: one group, or a few requests.
	got, truncated, err = r.ConsumerOffsets(5, topics, OffsetLimits{MaxGroups: 1, MaxReads: 1000})
	require.NoError(t, err)
	require.True(t, truncated)
	require.Len(t, got, 1)
	_, truncated, err = r.ConsumerOffsets(5, topics, OffsetLimits{MaxGroups: 100, MaxReads: 3})
	require.NoError(t, err)
	require.True(t, truncated)
	// No consumers at all.
	r2 := openAt(t, addr, root+"-empty")
	got, truncated, err = r2.ConsumerOffsets(5, topics, OffsetLimits{MaxGroups: 100, MaxReads: 1000})
	require.NoError(t, err)
	require.False(t, truncated)
	require.Empty(t, got)
}

func openAt(t *testing.T, addr, root string) *Registry {
	t.Helper()
	lb := &logBuf{}
	opts := testOpts(addr, root, 5, lb)
	return open(t, opts)
}
