package partition

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// TestTopics: an open publishes the topic (found by Get and GetBytes,
// listed by name); a failed check or open is not remembered; concurrent
// opens of one topic share one open; Replace only over the value it was
// given; Remove; an open ending after Close is undone and fails with
// ErrTopicsClosed.
func TestTopics(t *testing.T) {
	type top struct{ name string }
	ts := NewTopics[top]()
	ok := func() error { return nil }
	undo := func(*top) { t.Fatal("undo of an open before Close") }
	noTopic := func() error { return ErrNoTopic }

	if _, _, err := ts.Open("x", noTopic, nil, undo); !errors.Is(err, ErrNoTopic) {
		t.Fatalf("check: %v", err)
	}
	bad := errors.New("disk")
	if _, _, err := ts.Open("b", ok, func() (*top, error) { return nil, bad }, undo); err != bad {
		t.Fatalf("open: %v", err)
	}
	if ts.Get("b") != nil || len(ts.Names()) != 0 {
		t.Fatal("a failed open was published")
	}

	// Concurrent opens of "b": one open, shared.
	release := make(chan struct{})
	opens := 0
	var wg sync.WaitGroup
	got := make([]*top, 4)
	for i := range got {
		wg.Go(func() {
			got[i], _, _ = ts.Open("b", ok, func() (*top, error) { opens++; <-release; return &top{"b"}, nil }, undo)
		})
	}
	// "a" opens meanwhile.
	a, opened, err := ts.Open("a", ok, func() (*top, error) { return &top{"a"}, nil }, undo)
	if err != nil || !opened || a.name != "a" {
		t.Fatalf("a: %v %v %v", a, opened, err)
	}
	close(release)
	wg.Wait()
	if opens != 1 || got[0] == nil || slices.ContainsFunc(got, func(p *top) bool { return p != got[0] }) {
		t.Fatalf("%d opens, %v", opens, got)
	}
	if _, opened, _ := ts.Open("a", ok, nil, undo); opened {
		t.Fatal("an open topic opened again")
	}
	if ts.GetBytes([]byte("b")) != got[0] || !slices.Equal(ts.Names(), []string{"a", "b"}) {
		t.Fatalf("names %v", ts.Names())
	}
	if l := ts.List(); len(l) != 2 || l[0] != a || l[1] != got[0] {
		t.Fatalf("list %v", l)
	}

	a2 := &top{"a"}
	if ts.Replace("a", got[0], a2) || ts.Get("a") != a {
		t.Fatal("replaced over another value")
	}
	if !ts.Replace("a", a, a2) || ts.Get("a") != a2 {
		t.Fatal("not replaced")
	}
	if ts.Remove("a") != a2 || ts.Get("a") != nil || !slices.Equal(ts.Names(), []string{"b"}) || ts.Remove("a") != nil {
		t.Fatal("remove")
	}

	// An open ending after Close is undone.
	release = make(chan struct{})
	done := make(chan error)
	var undone *top
	go func() {
		_, _, err := ts.Open("c", ok, func() (*top, error) { <-release; return &top{"c"}, nil }, func(p *top) { undone = p })
		done <- err
	}()
	for {
		ts.mu.RLock()
		n := len(ts.opening)
		ts.mu.RUnlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	if l := ts.Close(); len(l) != 1 || l[0] != got[0] {
		t.Fatalf("close %v", l)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrTopicsClosed) || undone == nil || ts.Get("c") != nil {
		t.Fatalf("open after close: %v %v", err, undone)
	}
}
