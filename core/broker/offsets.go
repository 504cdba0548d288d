package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// offsetCallTimeout bounds one store call made for a commit or fetch.
	offsetCallTimeout = 10 * time.Second
	// maxOffsetCalls is how many commit/fetch store calls may run at once,
	// broker-wide; a connection that finds them all busy waits (backpressure).
	maxOffsetCalls = 64
)

// offsetState is the broker's consumer-offset store: the builtin file
// store or an offsetstore plugin, as server.toml's offset_store says.
type offsetState struct {
	store offsetstore.Store
	name  string
	sem   chan struct{}
	// Counters for the stats summary (cmd_commit, cmd_fetch, commit_failed).
	commits, fetches, commitFailed atomic.Int64
}

// builtinOffsetStores are the in-process stores, listed explicitly.
var builtinOffsetStores = map[string]func() offsetstore.Store{
	file.Name: file.New,
}

func (b *Broker) initOffsetStore() error {
	cfg := b.config()
	name := cfg.OffsetStore
	if name == "" {
		name = conf.OffsetStoreBuiltin
	}
	opts := offsetstore.OpenOptions{Name: name, Builtins: builtinOffsetStores, Timeout: offsetCallTimeout}
	if name == conf.OffsetStoreBuiltin {
		opts.Config = map[string]string{"path": cfg.OffsetStoreFilePath()}
	} else {
		p, ok := cfg.PluginByName(conf.PluginKindOffsetStore, name)
		if !ok {
			return fmt.Errorf("offset_store %q: no offsetstore [[plugin]] of that name", name)
		}
		opts.Config = p.Config
		opts.Supervisor = b.plugins
		opts.Plugin = &host.Spec{Kind: plugins.KindOffsetStore, Name: p.Name, Path: cfg.PluginPath(p),
			SHA256: p.SHA256, Args: p.Args, Env: p.Env, Config: p.Config}
	}
	ctx, cancel := context.WithTimeout(context.Background(), offsetStoreOpenTimeout)
	defer cancel()
	s, err := offsetstore.Open(ctx, opts)
	if err != nil {
		return fmt.Errorf("offset store: %w", err)
	}
	b.offsets.store, b.offsets.name, b.offsets.sem = s, name, make(chan struct{}, maxOffsetCalls)
	return nil
}

func (b *Broker) closeOffsetStore() error {
	if b.offsets.store == nil {
		return nil
	}
	return b.offsets.store.Close()
}

// offsetPositions checks the group name (message.ValidateGroup), parses a
// commit or fetch body and checks that every topic and partition exists
// here; it replies 400 itself and returns ok=false on a bad group or body.
// The positions are of this broker's partitions (its broker id).
func (c *conn) offsetPositions(r *protocol.Request, full bool) (string, []message.Position, bool) {
	if err := message.ValidateGroup(string(r.Group)); err != nil {
		c.reply(protocol.StatusBadRequest, r.Op.String()+": group "+protocol.Printable(r.Group)+": "+err.Error(), r.Opaque)
		return "", nil, false
	}
	lines, err := protocol.ParseOffsetLines(r.Body, full)
	if err != nil {
		c.reply(protocol.StatusBadRequest, r.Op.String()+": "+err.Error(), r.Opaque)
		return "", nil, false
	}
	group := string(r.Group)
	out := make([]message.Position, len(lines))
	for i, l := range lines {
		t, err := c.b.lookup([]byte(l.Topic), false)
		if err != nil {
			c.reply(protocol.StatusBadRequest, r.Op.String()+": unknown topic "+l.Topic, r.Opaque)
			return "", nil, false
		}
		if l.Partition >= int32(len(t.parts)) {
			c.reply(protocol.StatusBadRequest, r.Op.String()+": "+t.outOfRange(l.Partition), r.Opaque)
			return "", nil, false
		}
		if full && l.Offset < 0 {
			c.reply(protocol.StatusBadRequest, "commit: negative offset for "+l.Topic+" "+strconv.Itoa(int(l.Partition)), r.Opaque)
			return "", nil, false
		}
		out[i] = message.Position{Topic: t.name, Partition: message.Partition{BrokerID: c.b.config().BrokerID, Partition: l.Partition},
			Offset: l.Offset, MsgID: l.MsgID}
	}
	return group, out, true
}

// goOffsetCall runs a store call off the read loop, so a slow store does
// not hold up the connection's gets; its reply is queued like a put's.
func (c *conn) goOffsetCall(fn func(ctx context.Context)) {
	b := c.b
	select {
	case b.offsets.sem <- struct{}{}:
	case <-b.done:
		return
	}
	c.addPending(1)
	b.wg.Add(1) // the read loop's own count keeps wg above zero here
	go func() {
		defer b.wg.Done()
		defer func() { <-b.offsets.sem }()
		defer c.addPending(-1)
		ctx, cancel := context.WithTimeout(context.Background(), offsetCallTimeout)
		defer cancel()
		fn(ctx)
	}()
}

// handleCommit stores a group's offsets: 200 once the store has them, 500
// with the store's error otherwise (the client retries); never dropped.
func (c *conn) handleCommit(r *protocol.Request) {
	b := c.b
	b.offsets.commits.Add(1)
	group, ps, ok := c.offsetPositions(r, true)
	if !ok {
		return
	}
	opaque := r.Opaque
	c.goOffsetCall(func(ctx context.Context) {
		if err := b.offsets.store.Commit(ctx, group, ps); err != nil {
			b.offsets.commitFailed.Add(1)
			b.errorf("commit offsets of group %s (%d partitions) to %s: %v", group, len(ps), b.offsets.name, err)
			c.reply(protocol.StatusInternalError, "commit failed: "+offsetErrText(err), opaque)
			return
		}
		b.committed.record(group, ps)
		c.reply(protocol.StatusOK, strconv.Itoa(len(ps)), opaque)
	})
}

// handleFetch answers a group's stored offsets: one full line per
// requested partition, offset and msgId -1 when nothing is stored.
func (c *conn) handleFetch(r *protocol.Request) {
	b := c.b
	b.offsets.fetches.Add(1)
	group, ps, ok := c.offsetPositions(r, false)
	if !ok {
		return
	}
	opaque := r.Opaque
	c.goOffsetCall(func(ctx context.Context) {
		res, err := b.offsets.store.Load(ctx, group, ps)
		if err != nil {
			b.errorf("fetch offsets of group %s from %s: %v", group, b.offsets.name, err)
			c.reply(protocol.StatusInternalError, "fetch failed: "+offsetErrText(err), opaque)
			return
		}
		lines := make([]protocol.OffsetEntry, len(res))
		for i, x := range res { // Offset and MsgID -1 where nothing is stored
			lines[i] = protocol.OffsetEntry{Topic: x.Topic, Partition: x.Partition.Partition, Offset: x.Offset, MsgID: x.MsgID}
		}
		c.replyBytes(protocol.StatusOK, protocol.AppendOffsetLines(nil, lines, true), opaque)
	})
}

// offsetErrText is the one-line reason sent to the client.
func offsetErrText(err error) string {
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
