package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// JournalSet is a broker's group-commit journals, one per data directory
// (the directory as filepath.Clean gives it).
type JournalSet map[string]*Journal

// JournalDir is a data directory partitions may be opened in, and whether
// a group-commit topic may use it.
type JournalDir struct {
	Dir         string
	GroupCommit bool
}

// OpenJournalSet opens (and so recovers) the journal of every data
// directory that may hold group-commit partitions, before any partition
// of it is opened: each directory of dirs with GroupCommit, and any other
// that already has a journal (it may hold acknowledged puts to replay).
// Threshold-mode topics do not use a journal. On an error the journals
// opened are closed again.
func OpenJournalSet(dirs []JournalDir, opts JournalOptions) (JournalSet, error) {
	need := map[string]bool{}
	for _, d := range dirs {
		dir := filepath.Clean(d.Dir)
		if d.GroupCommit {
			need[dir] = true
		} else if _, ok := need[dir]; !ok {
			need[dir] = false
		}
	}
	s := make(JournalSet)
	for dir, gc := range need {
		if !gc {
			if _, err := os.Stat(filepath.Join(dir, JournalDirName)); err != nil {
				continue
			}
		}
		start := time.Now()
		j, err := OpenJournal(dir, opts)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("open journal of %s: %w", dir, err)
		}
		if opts.Logf != nil {
			opts.Logf("journal %s: rounds' fdatasync %s", j.Dir(), j.roundSyncHow)
		}
		if st := j.Stats(); st.Replayed > 0 && opts.Logf != nil {
			opts.Logf("journal %s: replayed %d records (%d already in place) in %v", j.Dir(), st.Replayed, st.Skipped, time.Since(start))
		}
		s[dir] = j
	}
	return s, nil
}

// For returns the journal of a group-commit topic's data directory, or
// nil (threshold mode, or no journal: the log then fsyncs on its own).
func (s JournalSet) For(dir string, unflushThreshold int) *Journal {
	if unflushThreshold > 0 {
		return nil
	}
	return s[filepath.Clean(dir)]
}

// Close closes the journals, after the logs. The set stays as it is: a
// topic opened concurrently with a close reads it without a lock, and gets
// a closed journal (its appends are refused).
func (s JournalSet) Close() error {
	var errs []error
	for dir, j := range s {
		if err := j.Close(); err != nil {
			errs = append(errs, fmt.Errorf("journal of %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
