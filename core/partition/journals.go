package partition

import (
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
)

// OpenJournals opens the group-commit journals (store.OpenJournalSet) of
// the data directories cfg names: the default data_dir when topics
// default to group commit and may be auto-created, and the data_dir of
// every configured topic. logf reports at info level; obs observes the
// journals' writes (metrics).
func OpenJournals(cfg *conf.Config, logf func(string, ...any), obs store.Observer) (store.JournalSet, error) {
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
	roundSync := store.RoundSyncAuto
	if cfg.JournalFdatasync == conf.JournalFdatasyncBlocking {
		roundSync = store.RoundSyncBlocking
	}
	return store.OpenJournalSet(dirs, store.JournalOptions{
		FileSize:           cfg.JournalFileSize,
		CheckpointBytes:    cfg.JournalCheckpointBytes,
		CheckpointInterval: time.Duration(cfg.JournalCheckpointInterval) * time.Millisecond,
		Logf:               logf,
		Recovery:           recovery,
		Observer:           obs,
		CheckpointSync:     ckptSync,
		RoundSync:          roundSync,
	})
}
