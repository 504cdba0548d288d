package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
)

// openJournals opens (and so recovers) the group-commit journal of every
// data directory that may hold group-commit partitions, before any
// partition of it is opened: the default data_dir when topics default to
// group commit and may be auto-created, the data_dir of every configured
// group-commit topic, and any data directory that already has a journal
// (it may hold acknowledged puts to replay). Threshold-mode topics do not
// use a journal.
func (b *Broker) openJournals() error {
	need := map[string]bool{}
	consider := func(dir string, groupCommit bool) {
		dir = filepath.Clean(dir)
		if groupCommit {
			need[dir] = true
		} else if _, ok := need[dir]; !ok {
			need[dir] = false
		}
	}
	consider(b.config().DataDir, b.config().AutoCreateTopics && b.config().UnflushThreshold <= 0)
	for _, name := range b.config().TopicNames() {
		if tc, ok := b.config().TopicConfig(name); ok {
			dir := tc.DataDir
			if dir == "" {
				dir = b.config().DataDir
			}
			consider(dir, tc.UnflushThreshold <= 0)
		}
	}
	recovery := store.RecoverQuarantine
	if b.config().Recovery == conf.RecoveryTruncate {
		recovery = store.RecoverTruncate
	}
	ckptSync := store.CheckpointSyncAuto
	if b.config().JournalCheckpointSync == conf.CheckpointSyncFsync {
		ckptSync = store.CheckpointSyncFsync
	}
	b.journals = make(map[string]*store.Journal)
	for dir, gc := range need {
		if !gc {
			if _, err := os.Stat(filepath.Join(dir, store.JournalDirName)); err != nil {
				continue
			}
		}
		start := time.Now()
		j, err := store.OpenJournal(dir, store.JournalOptions{
			FileSize:           b.config().JournalFileSize,
			CheckpointBytes:    b.config().JournalCheckpointBytes,
			CheckpointInterval: time.Duration(b.config().JournalCheckpointInterval) * time.Millisecond,
			Logf:               b.logf,
			Recovery:           recovery,
			Observer:           b.metrics.journalObserver(),
			CheckpointSync:     ckptSync,
		})
		if err != nil {
			b.closeJournals()
			return fmt.Errorf("open journal of %s: %w", dir, err)
		}
		st := j.Stats()
		if st.Replayed > 0 {
			b.logf("journal %s: replayed %d records (%d already in place) in %v", j.Dir(), st.Replayed, st.Skipped, time.Since(start))
		}
		b.journals[dir] = j
	}
	return nil
}

// journalFor returns the journal of a group-commit topic's data directory,
// or nil (threshold mode, or no journal: the log then fsyncs on its own).
func (b *Broker) journalFor(dir string, unflushThreshold int) *store.Journal {
	if unflushThreshold > 0 {
		return nil
	}
	return b.journals[filepath.Clean(dir)]
}

// closeJournals closes the journals, after the logs. The map stays: a
// topic opened concurrently with Close reads it without a lock, and gets a
// closed journal (its appends are refused).
func (b *Broker) closeJournals() error {
	var errs []error
	for dir, j := range b.journals {
		if err := j.Close(); err != nil {
			errs = append(errs, fmt.Errorf("journal of %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
