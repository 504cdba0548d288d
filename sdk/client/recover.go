package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/message"
)

// Local recovery defaults (reference §8).
const (
	// DefaultRecoverInterval is how often messages in the local recovery
	// store are replayed (MetaQ's recoverMessageIntervalInMills).
	DefaultRecoverInterval = 5 * time.Minute
	// defaultRecoverDelay is the pause between the start of Consume and
	// the first replay (shortened to the interval when that is shorter).
	defaultRecoverDelay = 5 * time.Second
	// recoverJournalName is the journal's file name inside a recovery
	// store directory.
	recoverJournalName = "journal"
)

// RejectPolicy takes a message whose handler failed on every attempt
// (see HandlerRetries), with the last error. The consumer moves past the
// message only after Reject returns nil; on an error it logs, waits and
// calls Reject again, so a message is never skipped before the policy has
// it. RejectFunc, Drop and RecoverLocally are policies.
type RejectPolicy interface {
	Reject(ctx context.Context, m *message.Message, err error) error
}

// Reject calls f and returns nil: the message is skipped once f returns.
func (f RejectFunc) Reject(ctx context.Context, m *message.Message, err error) error {
	f(ctx, m, err)
	return nil
}

type dropPolicy struct{}

func (dropPolicy) Reject(context.Context, *message.Message, error) error { return nil }

// Drop is the policy that logs a rejected message at Error level and skips
// it (MetaQ's DropPolicy). It is the default Reject policy.
func Drop() RejectPolicy { return dropPolicy{} }

type retryInPlace struct{ max time.Duration }

func (retryInPlace) Reject(context.Context, *message.Message, error) error {
	return errors.New("metaq: RetryInPlace is never asked to reject")
}

// DefaultInPlaceMaxBackoff is RetryInPlace's default longest pause.
const DefaultInPlaceMaxBackoff = time.Minute

// RetryInPlace is the policy of ordered consumption (RocketMQ's orderly
// listener): a message its handler fails on is never rejected nor skipped;
// it is handed to the handler again and again, the pause between attempts
// doubling from HandlerRetries' backoff up to maxBackoff (0:
// DefaultInPlaceMaxBackoff), until the handler succeeds or Consume ends.
// Its partition waits meanwhile (its position stays before the message),
// while the consumer's other partitions flow. A warning is logged when the
// attempts pass HandlerRetries' count.
func RetryInPlace(maxBackoff time.Duration) RejectPolicy {
	if maxBackoff <= 0 {
		maxBackoff = DefaultInPlaceMaxBackoff
	}
	return retryInPlace{max: maxBackoff}
}

type localRecover struct{ base string }

func (localRecover) Reject(context.Context, *message.Message, error) error {
	return errors.New("metaq: RecoverLocally works only as a consuming Client's Reject policy")
}

// RecoverLocally is the policy that writes a rejected message to a local
// recovery store before the consumer moves past it (MetaQ's
// LocalRecoverPolicy), set with Reject. The store is an append-only
// journal, fsynced on every change, in base/<topic>@<group>/ ("" for
// base: ~/.metaq_recover, or under os.TempDir() when there is no home
// directory). While Consume runs, its messages are replayed in insertion
// order to the handler every 5 minutes; each one that succeeds is removed,
// failures stay for the next round. Pending messages survive restarts:
// the next Consume with the same base, topic and group replays them.
//
// Consumers in one process with the same topic and group share the store
// (whichever replays first delivers a message); two processes must not
// use the same directory at once.
func RecoverLocally(base string) RejectPolicy { return localRecover{base: base} }

// defaultRecoverBase returns ~/.metaq_recover (MetaQ: ~/.meta_recover), or
// a directory under os.TempDir() when there is no home directory.
func defaultRecoverBase() string {
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".metaq_recover")
	}
	return filepath.Join(os.TempDir(), ".metaq_recover")
}

// recoverDir returns the recovery store directory of topic and group under
// base ("" for defaultRecoverBase()).
func recoverDir(base, topic, group string) string {
	if base == "" {
		base = defaultRecoverBase()
	}
	clean := strings.NewReplacer("/", "_", `\`, "_", "..", "__")
	return filepath.Join(base, clean.Replace(topic)+"@"+clean.Replace(group))
}

// withRejectPolicy sets what happens to a message that failed every
// attempt. Default: RecoverLocally("") with withGroup, Drop() without.
func withRejectPolicy(p RejectPolicy) consOption {
	return consumerOpt(func(c *consumerConfig) { c.reject = p })
}

// resolveReject sets c.rejectFn and c.recoverDir from the configured
// policy (called once by newBrokerConsumer).
func (c *brokerConsumer) resolveReject() {
	p := c.cfg.reject
	if p == nil {
		if c.cfg.groupSet {
			p = RecoverLocally("")
		} else {
			p = Drop()
		}
	}
	switch p := p.(type) {
	case dropPolicy:
		l := c.cfg.logger
		c.rejectFn = func(_ context.Context, m *message.Message, err error) error {
			l.Error("metaq: message rejected after retries and dropped", "topic", m.Topic, "partition", m.Partition,
				"offset", m.Offset, "id", m.ID, "err", err)
			return nil
		}
	case localRecover:
		c.recoverDir = recoverDir(p.base, c.topic, c.cfg.group)
	case retryInPlace:
		c.inPlaceMax = p.max
		c.rejectFn = p.Reject // never called
	default:
		c.rejectFn = p.Reject
	}
}

// startRecover opens the recovery store for a Consume run (when the policy
// is RecoverLocally) and returns the run's reject function and the store
// (nil for other policies). The caller releases the store after the run.
func (c *brokerConsumer) startRecover() (rejecter, *recoverStore, error) {
	if c.recoverDir == "" {
		return c.rejectFn, nil, nil
	}
	rs, err := acquireRecoverStore(c.recoverDir, c.cfg.logger)
	if err != nil {
		return nil, nil, err
	}
	l := c.cfg.logger
	return func(_ context.Context, m *message.Message, err error) error {
		if perr := rs.put(m); perr != nil {
			return perr
		}
		l.Warn("metaq: message rejected after retries; kept in the local recovery store", "topic", m.Topic,
			"partition", m.Partition, "offset", m.Offset, "id", m.ID, "dir", rs.dir, "err", err)
		return nil
	}, rs, nil
}

// reject hands m to the reject policy until it takes it; false means ctx
// ended first (m stays unhandled, so its position does not move).
func (c *brokerConsumer) reject(ctx context.Context, m *message.Message, herr error, rej rejecter) bool {
	for i := 0; ; i++ {
		err := rej(ctx, m, herr)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.cfg.logger.Error("metaq: reject policy failed; the message is kept and retried", "topic", m.Topic,
			"partition", m.Partition, "offset", m.Offset, "err", err)
		if (backoff.Policy{Min: c.cfg.retryBackoff, Max: 5 * time.Second}).Sleep(ctx, i+1) != nil {
			return false
		}
	}
}

// replayLoop replays rs to h every recoverInterval until ctx ends.
func (c *brokerConsumer) replayLoop(ctx context.Context, rs *recoverStore, h Handler) {
	t := time.NewTimer(min(defaultRecoverDelay, c.cfg.recoverInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rs.replay(ctx, h, c.cfg.logger)
		t.Reset(c.cfg.recoverInterval)
	}
}

// Journal record: [int32 BE len][uint32 BE crc32-IEEE(payload)][payload:
// len bytes]. A payload is [byte kind][uint64 BE seq], then for a put
// [uint16 topicLen][topic][int32 partition][int64 offset][int64 msgId]
// [byte hasAttr][uint32 attrLen][attr][uint32 bodyLen][body]. A keyed put
// (a message with a Key, kept by the Spool for the selector) is a put
// followed by [uint32 keyLen][key]. A put of a message with properties
// (key, timestamp, tags, headers) is a put followed by its properties block
// as the wire carries it, [int32 n][n bytes] (docs/protocol.md). A
// tombstone removes the put with its seq.
const (
	recPut       byte = 1
	recTombstone byte = 2
	recPutKeyed  byte = 3
	recPutProps  byte = 4
	recHeader         = 8
	recMaxLen         = 1 << 30
)

var errBadRecord = errors.New("bad recovery record")

func encodePut(seq uint64, m *message.Message) []byte {
	n := 1 + 8 + 2 + len(m.Topic) + 4 + 8 + 8 + 1 + 4 + len(m.Attribute) + 4 + len(m.Body)
	kind := recPut
	var props []byte
	if m.HasProperties() {
		kind = recPutProps
		props = m.AppendProperties(nil)
		n += len(props)
	} else if len(m.Key) > 0 {
		kind = recPutKeyed
		n += 4 + len(m.Key)
	}
	b := make([]byte, recHeader, recHeader+n)
	b = append(b, kind)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Topic)))
	b = append(b, m.Topic...)
	b = binary.BigEndian.AppendUint32(b, uint32(m.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(m.ID))
	if m.HasAttribute {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Attribute)))
	b = append(b, m.Attribute...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Body)))
	b = append(b, m.Body...)
	if kind == recPutKeyed {
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.Key)))
		b = append(b, m.Key...)
	}
	b = append(b, props...)
	return frame(b)
}

func encodeTombstone(seq uint64) []byte {
	b := make([]byte, recHeader, recHeader+9)
	b = append(b, recTombstone)
	b = binary.BigEndian.AppendUint64(b, seq)
	return frame(b)
}

// frame fills in the header of b, whose payload starts at recHeader.
func frame(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-recHeader))
	binary.BigEndian.PutUint32(b[4:], crc32.ChecksumIEEE(b[recHeader:]))
	return b
}

// decodeRecord reads the payload p of a record with a valid checksum.
func decodeRecord(p []byte) (kind byte, seq uint64, m *message.Message, err error) {
	if len(p) < 9 {
		return 0, 0, nil, errBadRecord
	}
	kind, seq, p = p[0], binary.BigEndian.Uint64(p[1:9]), p[9:]
	switch kind {
	case recTombstone:
		if len(p) != 0 {
			return 0, 0, nil, errBadRecord
		}
		return kind, seq, nil, nil
	case recPut, recPutKeyed, recPutProps:
	default:
		return 0, 0, nil, errBadRecord
	}
	take := func(n int) []byte {
		if err != nil || n < 0 || len(p) < n {
			err = errBadRecord
			return nil
		}
		v := p[:n]
		p = p[n:]
		return v
	}
	u16 := func() int {
		b := take(2)
		if b == nil {
			return 0
		}
		return int(binary.BigEndian.Uint16(b))
	}
	u32 := func() uint32 {
		b := take(4)
		if b == nil {
			return 0
		}
		return binary.BigEndian.Uint32(b)
	}
	u64 := func() uint64 {
		b := take(8)
		if b == nil {
			return 0
		}
		return binary.BigEndian.Uint64(b)
	}
	m = &message.Message{}
	m.Topic = string(take(u16()))
	m.Partition = int32(u32())
	m.Offset = int64(u64())
	m.ID = int64(u64())
	if h := take(1); h != nil {
		m.HasAttribute = h[0] == 1
	}
	m.Attribute = string(take(int(u32())))
	m.Body = slices.Clone(take(int(u32())))
	if kind == recPutKeyed {
		m.Key = slices.Clone(take(int(u32())))
		kind = recPut
	}
	if kind == recPutProps {
		block := slices.Clone(take(int(u32())))
		if err == nil && message.DecodeProperties(block, m) != nil {
			err = errBadRecord
		}
		kind = recPut
	}
	if err == nil && len(p) != 0 {
		err = errBadRecord
	}
	if err != nil {
		return 0, 0, nil, err
	}
	return kind, seq, m, nil
}

// recoverEntry is one pending message.
type recoverEntry struct {
	seq  uint64
	msg  *message.Message
	size int64 // bytes of its put record
}

// recoverStore is one topic@group's journal and its index of pending
// messages, shared by the consumers of this process that use its dir.
type recoverStore struct {
	dir, path string
	logger    *slog.Logger
	refs      int // under recoverStores.mu

	replayMu sync.Mutex // one replay at a time

	mu      sync.Mutex
	f       *os.File // nil until the journal exists
	size    int64    // bytes of valid records in f
	nextSeq uint64
	ents    []*recoverEntry // pending, by seq (insertion order)
	live    int64           // bytes of pending puts
	dead    int64           // bytes of removed puts and tombstones
	broken  error           // a failed write could not be undone; writes fail
	closed  bool
	// compactMin is recoverCompactMin, a field so that a test can lower it
	// for its own store alone.
	compactMin int64
}

var recoverStores = struct {
	mu sync.Mutex
	m  map[string]*recoverStore
}{m: make(map[string]*recoverStore)}

// recoverCompactMin is how many dead bytes a journal may hold before it
// is compacted (when they also outweigh the pending bytes); a journal is
// always compacted when nothing is pending.
const recoverCompactMin int64 = 1 << 20

// acquireRecoverStore returns the store of dir, loading its journal on
// first use; release it when done.
func acquireRecoverStore(dir string, logger *slog.Logger) (*recoverStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("metaq: recovery store %s: %w", dir, err)
	}
	recoverStores.mu.Lock()
	defer recoverStores.mu.Unlock()
	if s := recoverStores.m[abs]; s != nil {
		s.refs++
		return s, nil
	}
	s := &recoverStore{dir: abs, path: filepath.Join(abs, recoverJournalName), logger: logger, refs: 1,
		compactMin: recoverCompactMin}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("metaq: recovery store %s: %w", abs, err)
	}
	recoverStores.m[abs] = s
	return s, nil
}

// release drops one reference; the last closes the journal.
func (s *recoverStore) release() {
	recoverStores.mu.Lock()
	s.refs--
	last := s.refs == 0
	if last {
		delete(recoverStores.m, s.dir)
	}
	recoverStores.mu.Unlock()
	if last {
		s.mu.Lock()
		s.closed = true
		if s.f != nil {
			_ = s.f.Close()
			s.f = nil
		}
		s.mu.Unlock()
	}
}

// load reads the journal if it exists, cutting a torn or corrupt tail.
func (s *recoverStore) load() error {
	_ = os.Remove(s.path + ".tmp") // an unfinished compaction
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	byseq := make(map[uint64]*recoverEntry)
	off := 0
	for off < len(data) {
		rest := data[off:]
		if len(rest) < recHeader {
			break
		}
		n := int(int32(binary.BigEndian.Uint32(rest)))
		if n < 9 || n > recMaxLen || len(rest)-recHeader < n {
			break
		}
		p := rest[recHeader : recHeader+n]
		if crc32.ChecksumIEEE(p) != binary.BigEndian.Uint32(rest[4:]) {
			break
		}
		kind, seq, m, err := decodeRecord(p)
		if err != nil {
			break
		}
		size := int64(recHeader + n)
		s.nextSeq = max(s.nextSeq, seq+1)
		if kind == recPut {
			if _, dup := byseq[seq]; !dup {
				e := &recoverEntry{seq: seq, msg: m, size: size}
				byseq[seq] = e
				s.ents = append(s.ents, e)
				s.live += size
			}
		} else {
			if e := byseq[seq]; e != nil {
				delete(byseq, seq)
				s.live -= e.size
				s.dead += e.size
			}
			s.dead += size
		}
		off += recHeader + n
	}
	s.ents = slices.DeleteFunc(s.ents, func(e *recoverEntry) bool { return byseq[e.seq] != e })
	slices.SortFunc(s.ents, func(a, b *recoverEntry) int { return cmp.Compare(a.seq, b.seq) })
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if off < len(data) {
		if tornTail(data[off:]) {
			s.logger.Warn("metaq: recovery journal ends in a torn record; cutting it", "path", s.path,
				"offset", off, "bytes", len(data)-off)
		} else {
			bad := fmt.Sprintf("%s.corrupt-%d", s.path, time.Now().UnixNano())
			werr := os.WriteFile(bad, data, 0o600)
			s.logger.Error("metaq: recovery journal has a corrupt record before its end; records after it are "+
				"dropped, the original is kept", "path", s.path, "offset", off, "copy", bad, "copyErr", werr)
		}
		if err := f.Truncate(int64(off)); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
	}
	s.f, s.size = f, int64(off)
	return nil
}

// tornTail reports whether the bad bytes b at the end of a journal look
// like an interrupted append: a record cut short, or zeros.
func tornTail(b []byte) bool {
	if len(b) < recHeader {
		return true
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n >= 9 && n <= recMaxLen && len(b)-recHeader <= n {
		return true // the last record, cut or not fully written
	}
	return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 })
}

// openLocked creates the journal on the first write.
func (s *recoverStore) openLocked() error {
	switch {
	case s.closed:
		return ErrClosed
	case s.broken != nil:
		return s.broken
	case s.f != nil:
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := fsutil.SyncDir(s.dir); err != nil {
		_ = f.Close()
		_ = os.Remove(s.path)
		return err
	}
	s.f, s.size = f, 0
	return nil
}

// appendLocked writes rec at the end of the journal and fsyncs it. On
// failure it cuts the journal back, so a later append never follows a
// torn record.
func (s *recoverStore) appendLocked(rec []byte) error {
	if err := s.openLocked(); err != nil {
		return err
	}
	_, err := s.f.WriteAt(rec, s.size)
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			s.broken = fmt.Errorf("metaq: recovery journal %s unusable until restart: %w", s.path, terr)
		} else if serr := s.f.Sync(); serr != nil {
			s.broken = fmt.Errorf("metaq: recovery journal %s unusable until restart: %w", s.path, serr)
		}
		return fmt.Errorf("metaq: write recovery journal %s: %w", s.path, err)
	}
	s.size += int64(len(rec))
	return nil
}

// put stores a copy of m (its Key too) durably, after the pending ones.
func (s *recoverStore) put(m *message.Message) error {
	return s.putAll([]*message.Message{m})
}

// putAll stores copies of msgs durably, in order, after the pending ones,
// with one write and one fsync: all of them or, on an error, none.
func (s *recoverStore) putAll(msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf []byte
	sizes := make([]int, len(msgs))
	for i, m := range msgs {
		rec := encodePut(s.nextSeq+uint64(i), m)
		sizes[i] = len(rec)
		buf = append(buf, rec...)
	}
	if err := s.appendLocked(buf); err != nil {
		return err
	}
	for i, m := range msgs {
		c := *m
		c.Body, c.Key = slices.Clone(m.Body), slices.Clone(m.Key)
		clonePropsOf(&c)
		s.ents = append(s.ents, &recoverEntry{seq: s.nextSeq, msg: &c, size: int64(sizes[i])})
		s.nextSeq++
		s.live += int64(sizes[i])
	}
	return nil
}

// remove deletes the pending message seq durably, then compacts when
// the journal is mostly dead.
func (s *recoverStore) remove(seq uint64) error {
	_, err := s.removeAll([]uint64{seq})
	return err
}

// removeAll deletes the pending messages seqs durably, with one write and
// one fsync, then compacts when the journal is mostly dead. It returns
// how many of them were pending.
func (s *recoverStore) removeAll(seqs []uint64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var tombs []byte
	var found []uint64
	for _, seq := range seqs {
		if _, ok := s.findLocked(seq); ok && !slices.Contains(found, seq) {
			found = append(found, seq)
			tombs = append(tombs, encodeTombstone(seq)...)
		}
	}
	if len(found) == 0 {
		return 0, nil
	}
	if err := s.appendLocked(tombs); err != nil {
		return 0, err
	}
	tomb := int64(len(tombs) / len(found))
	for _, seq := range found {
		i, _ := s.findLocked(seq)
		e := s.ents[i]
		s.ents = slices.Delete(s.ents, i, i+1)
		s.live -= e.size
		s.dead += e.size + tomb
	}
	if len(s.ents) == 0 || (s.dead >= s.compactMin && s.dead > s.live) {
		if err := s.compactLocked(); err != nil {
			s.logger.Warn("metaq: recovery journal compaction failed; will retry", "path", s.path, "err", err)
		}
	}
	return len(found), nil
}

// findLocked returns the index of the pending message seq.
func (s *recoverStore) findLocked(seq uint64) (int, bool) {
	return slices.BinarySearchFunc(s.ents, seq, func(e *recoverEntry, seq uint64) int { return cmp.Compare(e.seq, seq) })
}

// compactLocked rewrites the journal with only the pending messages:
// write a temporary file, fsync, rename over the journal, fsync the
// directory. A crash at any point leaves either journal intact.
func (s *recoverStore) compactLocked() error {
	if s.f == nil || s.broken != nil {
		return s.broken
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	var size int64
	for _, e := range s.ents {
		rec := encodePut(e.seq, e.msg)
		if _, err := f.WriteAt(rec, size); err != nil {
			return fail(err)
		}
		size += int64(len(rec))
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fail(err)
	}
	_ = s.f.Close()
	s.f, s.size, s.live, s.dead = f, size, size, 0
	return fsutil.SyncDir(s.dir)
}

// pending returns the pending messages' seqs and messages, in insertion order.
func (s *recoverStore) pending() []recoverEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]recoverEntry, len(s.ents))
	for i, e := range s.ents {
		out[i] = *e
	}
	return out
}

// replay delivers the pending messages to h once each, in insertion
// order, removing those it handles; failures stay for the next round.
func (s *recoverStore) replay(ctx context.Context, h Handler, l *slog.Logger) {
	if !s.replayMu.TryLock() {
		return // another consumer of the same store is replaying
	}
	defer s.replayMu.Unlock()
	for _, e := range s.pending() {
		if ctx.Err() != nil {
			return
		}
		m := *e.msg
		m.Body = slices.Clone(e.msg.Body)
		clonePropsOf(&m)
		if err := h(ctx, &m); err != nil {
			if ctx.Err() == nil {
				l.Warn("metaq: replay of a recovered message failed; kept for the next round", "topic", m.Topic,
					"partition", m.Partition, "offset", m.Offset, "id", m.ID, "err", err)
			}
			continue
		}
		if err := s.remove(e.seq); err != nil {
			l.Error("metaq: could not remove a replayed message from the recovery store; it will be replayed again",
				"path", s.path, "err", err)
		}
	}
}

// clonePropsOf gives m copies of its tags and headers (values included), so
// that it shares no memory with the message it was copied from.
func clonePropsOf(m *message.Message) {
	m.Tags = slices.Clone(m.Tags)
	if m.Headers != nil {
		h := make(message.Headers, len(m.Headers))
		for i, x := range m.Headers {
			h[i] = message.Header{Key: x.Key, Value: bytes.Clone(x.Value)}
		}
		m.Headers = h
	}
}
