package topicadmin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

func testConfig(t *testing.T) *conf.Config {
	t.Helper()
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "base"}}
	require.NoError(t, cfg.Validate())
	return cfg
}

// TestBookChangesPersist: created, altered and deleted topics are written
// to topics.toml and applied again by the next Load; a server.toml topic
// deleted live is marked deleted.
func TestBookChangesPersist(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	k, err := Load(cfg, t.Logf)
	require.NoError(t, err)
	require.Equal(t, "server.toml", k.Source("base"))
	require.Equal(t, "auto-created", k.Source("live"))

	two := 2
	topics, err := k.Apply(*cfg, k.Create(conf.Topic{Name: "live", NumPartitions: &two}))
	require.NoError(t, err)
	require.Len(t, topics, 2)
	require.Equal(t, conf.TopicsFileName, k.Source("live"))
	prev := k.Snapshot()
	_, err = k.Apply(*cfg, k.Delete("base"))
	require.NoError(t, err)
	require.Equal(t, []string{"base"}, k.File().Deleted)

	again := testConfig(t)
	again.DataDir = cfg.DataDir
	k2, err := Load(again, t.Logf)
	require.NoError(t, err)
	require.Equal(t, []string{"live"}, again.TopicNames())
	tc, ok := again.TopicConfig("live")
	require.True(t, ok)
	require.Equal(t, 2, tc.NumPartitions)
	require.Equal(t, "", Check(again))

	// Undo: the snapshot taken before the delete brings base back.
	_, err = k2.Apply(*again, prev)
	require.NoError(t, err)
	require.Empty(t, k2.File().Deleted)
}

func TestBookRefusals(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	k, err := Load(cfg, t.Logf)
	require.NoError(t, err)

	err = CheckName("bad name")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, conf.ErrBadTopicName)
	require.EqualError(t, Exists("t", false), "topic exists: t")
	require.EqualError(t, Exists("t", true), "topic exists: t (auto-created)")
	require.True(t, errors.Is(NotConfigured("t"), ErrInvalid))
	require.NoError(t, CheckGrow("t", 2, 3))
	require.EqualError(t, CheckGrow("t", 2, 1), "invalid topic: t has 2 partitions; removing partitions is not supported (their messages would be lost)")
	require.ErrorIs(t, CheckGrow("t", 2, conf.MaxPartitions+1), ErrInvalid)

	// A change conf refuses is invalid and leaves the file alone.
	bad := -1
	_, err = k.Apply(*cfg, k.Create(conf.Topic{Name: "neg", NumPartitions: &bad}))
	require.ErrorIs(t, err, ErrInvalid)
	_, statErr := os.Stat(k.Path())
	require.ErrorIs(t, statErr, os.ErrNotExist)
	require.Equal(t, "auto-created", k.Source("neg"))

	// A topics.toml that does not parse is what Check and Load refuse.
	require.NoError(t, os.WriteFile(k.Path(), []byte("[[topic]\n"), 0o644))
	require.NotEmpty(t, Check(cfg))
	_, err = Load(testConfig(t), t.Logf)
	require.NoError(t, err) // another data_dir: no file
	cp := *cfg
	_, err = Load(&cp, t.Logf)
	require.Error(t, err)
}

func TestRemoveData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	parts := []string{filepath.Join(dir, "t-0"), filepath.Join(dir, "t-1")}
	for _, p := range parts {
		require.NoError(t, os.MkdirAll(p, 0o755))
	}
	boom := errors.New("boom")
	forgot := 0
	forget := func(_ context.Context, dirs []string) error {
		for _, p := range dirs {
			require.NoDirExists(t, p, "forgotten once removed")
		}
		require.Equal(t, parts, dirs)
		forgot++
		return nil
	}
	err := RemoveData(dir, parts, func(context.Context) error { return boom }, forget)
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "journal checkpoint: boom")
	require.DirExists(t, parts[0], "nothing removed before the checkpoint")
	require.Zero(t, forgot)

	checked := false
	require.NoError(t, RemoveData(dir, parts, func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		checked = ok
		return nil
	}, forget))
	require.True(t, checked, "the checkpoint is bounded")
	require.Equal(t, 1, forgot, "the journal forgets the removed partitions")
	for _, p := range parts {
		require.NoDirExists(t, p)
	}
	require.NoError(t, RemoveData(dir, nil, nil, nil))
	var fe *ForgetError
	require.NoError(t, os.MkdirAll(parts[0], 0o755))
	err = RemoveData(dir, parts[:1], nil, func(context.Context, []string) error { return boom })
	require.ErrorAs(t, err, &fe, "a failed forget is told apart: the data is removed")
	require.ErrorIs(t, err, boom)
	require.NoDirExists(t, parts[0])
}
