package partition

import (
	"errors"
	"slices"
	"sort"
	"sync"
)

// ErrTopicsClosed is Topics.Open's error once the table is closed.
var ErrTopicsClosed = errors.New("topics closed")

// Topics is a broker's table of open topics, T being its topic value:
// looked up by name on every put and get (Get, GetBytes: a read lock, no
// allocation), opened on first use (Open), listed by name (List, Names),
// replaced when it grows (Replace), removed when deleted (Remove) and
// closed once with the broker (Close). A topic value is immutable as far
// as the table is concerned: a change is a new value put in its place.
type Topics[T any] struct {
	mu    sync.RWMutex
	m     map[string]*T
	names []string // sorted
	// opening holds the topics whose partitions are being opened (without
	// mu); a second opener of the same topic waits for the first.
	opening map[string]*topicOpen[T]
	closed  bool
}

// topicOpen is one open of a topic in progress: done is closed when t or
// err is set.
type topicOpen[T any] struct {
	done chan struct{}
	t    *T
	err  error
}

// NewTopics returns an empty table.
func NewTopics[T any]() *Topics[T] {
	return &Topics[T]{m: make(map[string]*T), opening: make(map[string]*topicOpen[T])}
}

// Get returns topic name if it is open, else nil.
func (ts *Topics[T]) Get(name string) *T {
	ts.mu.RLock()
	t := ts.m[name]
	ts.mu.RUnlock()
	return t
}

// GetBytes is Get of a name from a request, without converting it.
func (ts *Topics[T]) GetBytes(name []byte) *T {
	ts.mu.RLock()
	t := ts.m[string(name)]
	ts.mu.RUnlock()
	return t
}

// Open returns topic name, opening it with open first if it is not open
// yet. open runs without the table's lock, so lookups of other topics,
// and opens of them, go on meanwhile; concurrent opens of the same topic
// wait for one open and share its outcome. A failed open is not
// remembered: the next one tries again. check runs under the lock before
// an open starts, and its error is returned as is (the topic is not
// configured). An open that ends after Close is undone with undo (Close
// has returned the topics, and the new one must not be missed) and fails
// with ErrTopicsClosed. opened is true when this call published the
// topic.
func (ts *Topics[T]) Open(name string, check func() error, open func() (*T, error), undo func(*T)) (t *T, opened bool, err error) {
	ts.mu.RLock()
	t = ts.m[name]
	ts.mu.RUnlock()
	if t != nil {
		return t, false, nil
	}
	ts.mu.Lock()
	if t := ts.m[name]; t != nil {
		ts.mu.Unlock()
		return t, false, nil
	}
	if op := ts.opening[name]; op != nil {
		ts.mu.Unlock()
		<-op.done
		return op.t, false, op.err
	}
	if err := check(); err != nil {
		ts.mu.Unlock()
		return nil, false, err
	}
	op := &topicOpen[T]{done: make(chan struct{})}
	ts.opening[name] = op
	ts.mu.Unlock()

	t, err = open()

	ts.mu.Lock()
	delete(ts.opening, name)
	if err == nil && ts.closed {
		undo(t)
		t, err = nil, ErrTopicsClosed
	}
	if err == nil {
		ts.m[name] = t
		ts.names = append(ts.names, name)
		sort.Strings(ts.names)
	}
	ts.mu.Unlock()
	op.t, op.err = t, err
	close(op.done)
	return t, err == nil, err
}

// List returns the topics sorted by name.
func (ts *Topics[T]) List() []*T {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	out := make([]*T, 0, len(ts.names))
	for _, n := range ts.names {
		out = append(out, ts.m[n])
	}
	return out
}

// Names returns the topic names, sorted.
func (ts *Topics[T]) Names() []string {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	return slices.Clone(ts.names)
}

// Replace puts nt in place of topic name if it is still old (a grown
// topic); it reports whether it did.
func (ts *Topics[T]) Replace(name string, old, nt *T) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m[name] != old {
		return false
	}
	ts.m[name] = nt
	return true
}

// Remove takes topic name out of the table and returns it (nil when it
// was not open).
func (ts *Topics[T]) Remove(name string) *T {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[name]
	delete(ts.m, name)
	ts.names = slices.DeleteFunc(ts.names, func(n string) bool { return n == name })
	return t
}

// Close closes the table and returns the topics in it, which the caller
// closes: an open ending later is undone (Open).
func (ts *Topics[T]) Close() []*T {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	out := make([]*T, 0, len(ts.m))
	for _, t := range ts.m {
		out = append(out, t)
	}
	return out
}
