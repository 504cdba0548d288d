package store

import (
	"path/filepath"
	"testing"
)

func TestJournalSetOpensGroupCommitDirsOnly(t *testing.T) {
	gc, th := t.TempDir(), t.TempDir()
	s, err := OpenJournalSet([]JournalDir{{Dir: gc + "/", GroupCommit: true}, {Dir: th}, {Dir: gc}}, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 || s.For(gc, 0) == nil {
		t.Fatalf("set %v: want the journal of %s alone", s, gc)
	}
	if s.For(gc, 100) != nil || s.For(th, 0) != nil {
		t.Fatal("a threshold-mode topic, or a directory without a journal, got one")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A directory that has a journal is opened even if only threshold
	// topics name it now.
	s, err = OpenJournalSet([]JournalDir{{Dir: filepath.Join(gc, ".")}}, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.For(gc, 0) == nil {
		t.Fatal("the existing journal was not opened")
	}
}
