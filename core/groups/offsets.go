package groups

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/file"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

const (
	// offsetStoreOpenTimeout bounds opening the offset store at startup
	// (launching a plugin and its Init).
	offsetStoreOpenTimeout = 30 * time.Second
	// CallTimeout bounds one store call made for a commit, a fetch or a
	// describe.
	CallTimeout = 10 * time.Second
	// maxOffsetCalls is how many commit/fetch store calls may run at once,
	// broker-wide; a connection that finds them all busy waits (backpressure).
	maxOffsetCalls = 64
)

// Offsets is the broker's consumer-offset store: the builtin file store
// or an offsetstore plugin, as server.toml's offset_store says. A commit
// through it is also recorded in the committed offsets behind lag.
type Offsets struct {
	store     offsetstore.Store
	name      string
	brokerID  int
	committed *Committed
	sem       chan struct{}
	// Counters for the stats summary (cmd_commit, cmd_fetch, commit_failed).
	commits, fetches, commitFailed atomic.Int64
}

// builtinOffsetStores are the in-process stores, listed explicitly.
var builtinOffsetStores = map[string]func() offsetstore.Store{
	file.Name: file.New,
}

// OffsetsConfig is the offset store's slice of the configuration
// (restart-only values).
type OffsetsConfig struct {
	// Name is offset_store: conf.OffsetStoreBuiltin or a plugin's name.
	Name string
	// Store is handed to the store's Init.
	Store map[string]string
	// Plugin is the offsetstore plugin to launch; nil for the builtin.
	Plugin   *host.Spec
	BrokerID int
}

// OffsetsFromConf returns the offset store's configuration in cfg: an
// error when offset_store names no offsetstore plugin.
func OffsetsFromConf(cfg *conf.Config) (OffsetsConfig, error) {
	name := cfg.OffsetStore
	if name == "" {
		name = conf.OffsetStoreBuiltin
	}
	oc := OffsetsConfig{Name: name, BrokerID: cfg.BrokerID}
	if name == conf.OffsetStoreBuiltin {
		oc.Store = map[string]string{"path": cfg.OffsetStoreFilePath()}
		return oc, nil
	}
	p, ok := cfg.PluginByName(conf.PluginKindOffsetStore, name)
	if !ok {
		return oc, fmt.Errorf("offset_store %q: no offsetstore [[plugin]] of that name", name)
	}
	oc.Store = p.Config
	oc.Plugin = &host.Spec{Kind: plugins.KindOffsetStore, Name: p.Name, Path: cfg.PluginPath(p),
		SHA256: p.SHA256, Args: p.Args, Env: p.Env, Config: p.Config}
	return oc, nil
}

// OpenOffsets opens the store cfg names (a plugin through sup), recording
// the commits made through it in committed.
func OpenOffsets(cfg OffsetsConfig, sup *host.Supervisor, committed *Committed) (*Offsets, error) {
	opts := offsetstore.OpenOptions{Name: cfg.Name, Config: cfg.Store, Builtins: builtinOffsetStores, Timeout: CallTimeout}
	if cfg.Plugin != nil {
		opts.Supervisor, opts.Plugin = sup, cfg.Plugin
	}
	ctx, cancel := context.WithTimeout(context.Background(), offsetStoreOpenTimeout)
	defer cancel()
	s, err := offsetstore.Open(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("offset store: %w", err)
	}
	return &Offsets{store: s, name: cfg.Name, brokerID: cfg.BrokerID, committed: committed,
		sem: make(chan struct{}, maxOffsetCalls)}, nil
}

// OpenOffsetsFromConf opens the offset store server.toml names
// (OffsetsFromConf, OpenOffsets).
func OpenOffsetsFromConf(cfg *conf.Config, sup *host.Supervisor, committed *Committed) (*Offsets, error) {
	oc, err := OffsetsFromConf(cfg)
	if err != nil {
		return nil, err
	}
	return OpenOffsets(oc, sup, committed)
}

// Close closes the store; a nil Offsets (never opened) has nothing to
// close.
func (o *Offsets) Close() error {
	if o == nil {
		return nil
	}
	return o.store.Close()
}

// Name is the store's name (offset_store).
func (o *Offsets) Name() string { return o.name }

// Acquire takes one of the maxOffsetCalls slots for a store call made off
// a connection's read loop, waiting for one (backpressure); false when
// done closes first. Release gives it back.
func (o *Offsets) Acquire(done <-chan struct{}) bool {
	select {
	case o.sem <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// Release gives back a slot Acquire took.
func (o *Offsets) Release() { <-o.sem }

// Go runs fn, a store call made off a connection's read loop, with a
// CallTimeout context, on a goroutine start starts (one the broker waits
// for when it closes), holding one of the maxOffsetCalls slots: it waits
// for a slot (Acquire) and reports false, fn not run, when done closes
// first.
func (o *Offsets) Go(done <-chan struct{}, start func(func()), fn func(ctx context.Context)) bool {
	if !o.Acquire(done) {
		return false
	}
	start(func() {
		defer o.Release()
		ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		fn(ctx)
	})
	return true
}

// StoreError is a failed offset store call: Op is "commit" or "fetch".
type StoreError struct {
	Op  string
	Err error
}

// Error is the reply's body: "<op> failed: " and Reason.
func (e *StoreError) Error() string { return e.Op + " failed: " + Reason(e) }

func (e *StoreError) Unwrap() error { return e.Err }

// Reason is the one-line reason of an offset store failure shown to a
// client or a person: a plugin that is down and a timeout say so.
func Reason(err error) string {
	var se *StoreError
	if errors.As(err, &se) {
		err = se.Err
	}
	switch {
	case errors.Is(err, plugins.ErrUnavailable):
		return "offset store unavailable (plugin down): " + oneLine(err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return "offset store timed out: " + oneLine(err.Error())
	}
	return oneLine(err.Error())
}

func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// Commit stores group's offsets ps (all of this broker) and records them
// in the committed offsets behind lag. A store failure is a *StoreError.
func (o *Offsets) Commit(ctx context.Context, group string, ps []message.Position) error {
	if err := o.store.Commit(ctx, group, ps); err != nil {
		return &StoreError{"commit", err}
	}
	o.committed.Record(group, ps)
	return nil
}

// Load returns group's stored offsets of ps, Offset and MsgID -1 where
// nothing is stored. A store failure is a *StoreError.
func (o *Offsets) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	res, err := o.store.Load(ctx, group, ps)
	if err != nil {
		return nil, &StoreError{"fetch", err}
	}
	return res, nil
}

// CommitRequest is a commit request's store call (Commit): a failure is
// counted (CountCommitFailed) and logged through errorf.
func (o *Offsets) CommitRequest(ctx context.Context, group string, ps []message.Position, errorf func(string, ...any)) error {
	err := o.Commit(ctx, group, ps)
	if err != nil {
		o.CountCommitFailed()
		errorf("commit offsets of group %s (%d partitions) to %s: %v", group, len(ps), o.name, errors.Unwrap(err))
	}
	return err
}

// FetchRequest is a fetch request's store call (Load): its reply's
// lines, offset and msgId -1 where nothing is stored; a failure is
// logged through errorf.
func (o *Offsets) FetchRequest(ctx context.Context, group string, ps []message.Position, errorf func(string, ...any)) ([]protocol.OffsetEntry, error) {
	res, err := o.Load(ctx, group, ps)
	if err != nil {
		errorf("fetch offsets of group %s from %s: %v", group, o.name, errors.Unwrap(err))
		return nil, err
	}
	lines := make([]protocol.OffsetEntry, len(res))
	for i, x := range res {
		lines[i] = protocol.OffsetEntry{Topic: x.Topic, Partition: x.Partition.Partition, Offset: x.Offset, MsgID: x.MsgID}
	}
	return lines, nil
}

// Committed returns group's stored offsets of every partition of topic
// (nparts of them, on this broker), -1 where nothing is stored.
func (o *Offsets) Committed(ctx context.Context, group, topic string, nparts int) ([]int64, error) {
	ps := make([]message.Position, nparts)
	for p := range ps {
		ps[p] = message.Position{Topic: topic, Partition: message.Partition{BrokerID: o.brokerID, Partition: int32(p)}}
	}
	res, err := o.Load(ctx, group, ps)
	if err != nil {
		return nil, err
	}
	out := make([]int64, nparts)
	for i := range out {
		out[i] = -1
	}
	for _, x := range res {
		if p := int(x.Partition.Partition); p >= 0 && p < len(out) {
			out[p] = x.Offset
		}
	}
	return out, nil
}

// OffsetStats are the offset requests' counters.
type OffsetStats struct {
	Commits, Fetches, CommitFailed int64
}

// Stats returns the counters.
func (o *Offsets) Stats() OffsetStats {
	return OffsetStats{Commits: o.commits.Load(), Fetches: o.fetches.Load(), CommitFailed: o.commitFailed.Load()}
}

// CountCommit counts a commit request (cmd_commit), CountFetch a fetch
// (cmd_fetch) and CountCommitFailed a commit the store refused
// (commit_failed). The protocol layer counts each request as it arrives,
// valid or not.
func (o *Offsets) CountCommit()       { o.commits.Add(1) }
func (o *Offsets) CountFetch()        { o.fetches.Add(1) }
func (o *Offsets) CountCommitFailed() { o.commitFailed.Add(1) }
