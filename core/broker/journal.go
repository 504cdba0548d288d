package broker

import (
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
)

// openJournals opens the group-commit journals (store.OpenJournalSet) of
// the data directories server.toml names: the default data_dir when topics
// default to group commit and may be auto-created, and the data_dir of
// every configured topic.
func (b *Broker) openJournals() error {
	cfg := b.config()
	dirs := []store.JournalDir{{Dir: cfg.DataDir, GroupCommit: cfg.AutoCreateTopics && cfg.UnflushThreshold <= 0}}
	for _, name := range cfg.TopicNames() {
		if tc, ok := cfg.TopicConfig(name); ok {
			dir := tc.DataDir
			if dir == "" {
				dir = cfg.DataDir
			}
			dirs = append(dirs, store.JournalDir{Dir: dir, GroupCommit: tc.UnflushThreshold <= 0})
		}
	}
	recovery := store.RecoverQuarantine
	if cfg.Recovery == conf.RecoveryTruncate {
		recovery = store.RecoverTruncate
	}
	ckptSync := store.CheckpointSyncAuto
	if cfg.JournalCheckpointSync == conf.CheckpointSyncFsync {
		ckptSync = store.CheckpointSyncFsync
	}
	js, err := store.OpenJournalSet(dirs, store.JournalOptions{
		FileSize:           cfg.JournalFileSize,
		CheckpointBytes:    cfg.JournalCheckpointBytes,
		CheckpointInterval: time.Duration(cfg.JournalCheckpointInterval) * time.Millisecond,
		Logf:               b.logf,
		Recovery:           recovery,
		Observer:           b.metrics.journalObserver(),
		CheckpointSync:     ckptSync,
	})
	if err != nil {
		return err
	}
	b.journals = js
	return nil
}

// journalFor is b.journals.For.
func (b *Broker) journalFor(dir string, unflushThreshold int) *store.Journal {
	return b.journals.For(dir, unflushThreshold)
}
