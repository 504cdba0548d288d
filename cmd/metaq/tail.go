package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const tailHelp = `
Ship log files to a topic, as "tail -F" follows them (MetaQ's tail4j). Each
argument is a file or a glob (quote it so the shell does not expand it);
files that come to match a glob later are picked up. Each line becomes a
message, or with --start-pattern each multi-line record: a line that
matches the regular expression begins a record, the lines that do not join
the record before them (a stack trace after its log line). Every message
carries the headers file (the file's absolute path) and host (--host,
default the hostname); --key-from file or host also makes that its key
(messages with the same key go to the same partition).

Rotation is followed both ways: by rename (the old file is read to its
end, then the new one from its start; with a glob that also matches the
renamed file, that file is recognized by its device and inode and not
shipped again) and by copytruncate (a file that shrank, or whose first
bytes changed, is read again from its start). Compressed files (.gz and
the like, or a gzip, bzip2, xz, zstd, lz4 or zip header) are skipped with a
warning. A record longer than --max-record is cut into messages of
--max-record bytes, with a warning. A line is shipped once its "\n" is
written; a multi-line record once the next record begins or nothing was
written for --record-wait. The last line of a file without "\n" waits,
except with --once and in a renamed file read to its end.

Delivery is at least once. Lines are sent in batches of at most --batch
records and --batch-bytes bytes through the Go client; the position of every file (device, inode,
path, offset) is written to the --state file (a temporary file, fsynced,
renamed) only after the broker acknowledged the batch, so that a shipper
killed at any moment resends at most its last unacknowledged batch when
started again with the same --state, and loses nothing. When the broker
cannot be reached, the records go to a spool next to the state file
(FILE.spool, the client's Spool: fsynced, resent in the background, also by
the next run); reading pauses while the spool holds --spool-max messages or
more. SIGINT or SIGTERM sends the batch in hand, saves the state and exits
with status 0.

With --once it ships what the files hold (their last lines without "\n"
included), waits up to twice --timeout for the spool to drain, and exits:
for scripts and tests. A state file that cannot be
read, or that belongs to another topic, is an error: move it away, or
--reset-state to start over (files are
then shipped from their start, or their end with --from-end). An argument
that is not a valid glob, or a named file that exists and cannot be read,
is an error at start; files that appear later and cannot be read are
reported and skipped.

examples:
  metaq tail --topic logs /var/log/app.log
  metaq tail --topic logs --state /var/lib/metaq/app.state '/var/log/app/*.log'
  metaq tail --topic logs '/var/log/app/app.log*'     # and its rotations (not the .gz)
  metaq tail --topic logs --start-pattern '^\d{4}-\d\d-\d\d ' --key-from host app.log
  metaq tail --topic logs --once --state run.state app.log
`

// tailConfig is what `metaq tail` was asked to do.
type tailConfig struct {
	topic      string
	patterns   []string // absolute
	state      string   // absolute
	stateShown string   // as given
	start      *regexp.Regexp
	keyFrom    string
	host       string
	once       bool
	fromEnd    bool
	resetState bool
	batch      int
	batchBytes int
	maxRecord  int
	poll       time.Duration
	recordWait time.Duration
	spoolMax   int
	zk, root   string
}

func cmdTail(e *env) *cobra.Command {
	return leaf(e, "tail", "tail --topic T [--state FILE] [--start-pattern REGEX] [--key-from file|host|none] [--once] [--zk CONNECT] FILE|GLOB...", tailHelp, func(fs *pflag.FlagSet) func(args []string) error {
		topic := fs.String("topic", "", "topic to ship to (required)")
		state := fs.String("state", "", "state `file` with every file's shipped position (default ~/.metaq_tail/TOPIC.state)")
		startPat := fs.String("start-pattern", "", "regular expression (Go syntax) of a record's first line: lines that do not match join the record before them")
		keyFrom := fs.String("key-from", "none", "message key: file (the path), host or none")
		host := fs.String("host", "", "value of the host header (default: the hostname)")
		once := fs.Bool("once", false, "ship what the files hold and exit")
		fromEnd := fs.Bool("from-end", false, "start files the state file does not know at their end, not their start (files that appear later start at 0)")
		resetState := fs.Bool("reset-state", false, "start over when the state file cannot be read or belongs to another topic (it is replaced)")
		batch := fs.Int("batch", 4096, "records per batch: sent together, acknowledged, then the state saved")
		batchBytes := fs.Int("batch-bytes", 8<<20, "bytes of records per batch, at most (a record longer than this is a batch of its own): bounds the shipper's memory with long lines")
		maxRecord := fs.Int("max-record", 512<<10, "longest record in bytes; a longer one is cut into several messages")
		poll := fs.Duration("poll", 250*time.Millisecond, "how often files are checked for new lines, new files and rotation")
		recordWait := fs.Duration("record-wait", time.Second, "a multi-line record ends after this long without new lines; a renamed file is closed after this long at its end")
		spoolMax := fs.Int("spool-max", 100000, "stop reading while the spool holds this many messages")
		zkc := fs.String("zk", "", "ship to the cluster registered at this ZooKeeper `host:port[,...]` instead of --addr")
		root := fs.String("root", cluster.DefaultRoot, "MetaQ's zkRoot (with --zk)")
		return func(args []string) error {
			if *topic == "" || strings.ContainsAny(*topic, " \r\n\t/,") {
				return usagef("--topic is required (and must not contain spaces, / or ,)")
			}
			if len(args) == 0 {
				return usagef("name at least one file or glob to follow")
			}
			cfg := tailConfig{topic: *topic, keyFrom: *keyFrom, host: *host, once: *once, fromEnd: *fromEnd, resetState: *resetState,
				batch: *batch, batchBytes: *batchBytes, maxRecord: *maxRecord, poll: *poll, recordWait: *recordWait, spoolMax: *spoolMax, zk: *zkc, root: *root}
			for _, a := range args {
				if _, err := filepath.Match(a, ""); err != nil {
					return usagef("bad glob %q: %v", a, err)
				}
				abs, err := filepath.Abs(a)
				if err != nil {
					return err
				}
				cfg.patterns = append(cfg.patterns, abs)
			}
			switch *keyFrom {
			case "file", "host", "none":
			default:
				return usagef("--key-from: want file, host or none, got %q", *keyFrom)
			}
			if *startPat != "" {
				re, err := regexp.Compile(*startPat)
				if err != nil {
					return usagef("--start-pattern: %v", err)
				}
				cfg.start = re
			}
			if *batch <= 0 || *batch > 1<<20 {
				return usagef("--batch must be between 1 and 1048576")
			}
			if *batchBytes <= 0 || *batchBytes > 1<<30 {
				return usagef("--batch-bytes must be between 1 and 1073741824")
			}
			if *maxRecord <= 0 || *maxRecord > message.DefaultMaxMessageSize-64<<10 {
				return usagef("--max-record must be between 1 and %d", message.DefaultMaxMessageSize-64<<10)
			}
			if *poll <= 0 || *recordWait <= 0 {
				return usagef("--poll and --record-wait must be positive")
			}
			if *spoolMax <= 0 {
				return usagef("--spool-max must be positive")
			}
			if *zkc != "" && !strings.HasPrefix(*root, "/") {
				return usagef("--root must start with /, got %q", *root)
			}
			if cfg.host == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("hostname: %v (give --host)", err)
				}
				cfg.host = h
			}
			if *state == "" {
				home, err := os.UserHomeDir()
				if err != nil || home == "" {
					return usagef("no home directory for the default state file: give --state")
				}
				*state = filepath.Join(home, ".metaq_tail", *topic+".state")
			}
			abs, err := filepath.Abs(*state)
			if err != nil {
				return err
			}
			cfg.state, cfg.stateShown = abs, *state
			return runTail(e, cfg)
		}
	})
}

// tailFile is a file being followed.
type tailFile struct {
	key      string // identity: device and inode (the path without them)
	dev, ino uint64
	path     string
	f        *os.File
	headers  message.Headers // file and host
	msgKey   []byte

	readOff int64  // the next byte to read
	bufOff  int64  // the file offset of buf[0]
	buf     []byte // read, not yet cut into records
	acked   int64  // the end of the last acknowledged record
	eof     bool   // the last read found nothing
	grew    time.Time
	gone    bool  // no pattern matches its path any more (renamed away, deleted)
	cutting bool  // the last record was cut at --max-record
	size    int64 // at the last look (scan)

	fpLen int64
	fpCRC uint32
}

// tailRecord is a record of a batch.
type tailRecord struct {
	tf  *tailFile
	end int64 // file offset after it
	m   *message.Message
	err error
	res client.SendResult
}

// tailer follows the files and ships their records.
type tailer struct {
	e      *env
	cfg    tailConfig
	split  recordSplitter
	cl     *client.Client
	files  map[string]*tailFile
	resume map[string]tailFileState // saved positions of files not opened yet
	warned map[string]bool
	first  bool // the first scan: errors refuse to start
	hdrKey []byte

	records, bytes, spooled int64
}

// readChunk is how much a file read takes at once.
const readChunk = 256 << 10

func identityKey(path string, dev, ino uint64) string {
	if dev == 0 && ino == 0 {
		return "path:" + path
	}
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10)
}

func runTail(e *env, cfg tailConfig) error {
	if err := os.MkdirAll(filepath.Dir(cfg.state), 0o755); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	lock, err := os.OpenFile(cfg.state+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	defer lock.Close()
	if err := lockFile(lock); err != nil {
		return fmt.Errorf("state file %s is in use by another metaq tail (%s.lock: %v)", cfg.state, cfg.state, err)
	}
	st, err := loadTailState(cfg.state)
	if err != nil {
		if !errors.Is(err, errStateCorrupt) {
			return fmt.Errorf("state file %s: %w", cfg.state, err)
		}
		if !cfg.resetState {
			return fmt.Errorf("state file %s: %w; refusing to start: move it away, or give --reset-state to start over (files are shipped again from their start, or their end with --from-end)", cfg.state, err)
		}
		fmt.Fprintf(e.stderr, "metaq tail: state file %s: %v; starting over (--reset-state)\n", cfg.state, err)
		st = &tailState{Version: tailStateVersion}
	}
	if st.Topic != "" && st.Topic != cfg.topic {
		if !cfg.resetState {
			return fmt.Errorf("state file %s belongs to topic %s, not %s: give each topic its own --state, or give --reset-state to start over (files are shipped again from their start, or their end with --from-end)", cfg.state, st.Topic, cfg.topic)
		}
		fmt.Fprintf(e.stderr, "metaq tail: state file %s belongs to topic %s, not %s; starting over (--reset-state)\n", cfg.state, st.Topic, cfg.topic)
		st = &tailState{Version: tailStateVersion}
	}
	t := &tailer{e: e, cfg: cfg, split: recordSplitter{start: cfg.start, max: cfg.maxRecord},
		files: map[string]*tailFile{}, resume: map[string]tailFileState{}, warned: map[string]bool{}, first: true}
	for _, fs := range st.Files {
		t.resume[identityKey(fs.Path, fs.Dev, fs.Ino)] = fs
	}
	if cfg.keyFrom == "host" {
		t.hdrKey = []byte(cfg.host)
	}
	defer t.closeFiles()
	if err := t.scan(); err != nil {
		return err
	}
	t.first = false

	if err := e.sec.prepare(); err != nil {
		return err
	}
	opts := append(clientOpts(e), client.ProduceTimeout(e.timeout), client.MaxMessageSize(message.DefaultMaxMessageSize),
		client.Batching(min(cfg.batch, 4096), 1<<20, time.Millisecond), client.MaxBufferedMessages(cfg.batch+1024),
		client.Spool(cfg.state+".spool"))
	if cfg.zk != "" {
		if err := zkTopicExists(e, cfg.zk, cfg.root, cfg.topic); err != nil {
			return err
		}
		opts = append(opts, client.ZooKeeper(cfg.zk, cfg.root))
	} else {
		if _, err := topicPartitions(e, cfg.topic); err != nil {
			if strings.HasPrefix(err.Error(), "unknown topic") {
				return err
			}
			fmt.Fprintf(e.stderr, "metaq tail: the broker at %s cannot be reached (%v): records are spooled until it is back\n", e.addr, err)
		}
		opts = append(opts, client.Brokers(e.addr))
	}
	if cfg.keyFrom != "none" {
		opts = append(opts, client.Selector(selector.HashByKey()))
	}
	cl, err := client.New(opts...)
	if err != nil {
		return err
	}
	t.cl = cl
	runErr := t.loop()
	if cfg.once && runErr == nil {
		// Give the spool, of this run or an earlier one, time to drain.
		for end := time.Now().Add(2 * e.timeout); cl.SpoolBacklog() > 0 && time.Now().Before(end) && e.ctx.Err() == nil; {
			_ = backoff.Sleep(e.ctx, 50*time.Millisecond)
		}
	}
	if err := t.save(); err != nil && runErr == nil {
		runErr = err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	_ = cl.Close(ctx)
	cancel()
	left := cl.SpoolBacklog()
	fmt.Fprintf(e.stderr, "metaq tail: shipped %d records (%d bytes) from %d file(s); state in %s\n", t.records, t.bytes, len(t.files), cfg.stateShown)
	if left > 0 {
		fmt.Fprintf(e.stderr, "metaq tail: %d records wait in the spool %s.spool: the next run with this --state resends them\n", left, cfg.stateShown)
	}
	return runErr
}

func (t *tailer) warnOnce(key, format string, args ...any) {
	if t.warned[key] {
		return
	}
	t.warned[key] = true
	fmt.Fprintf(t.e.stderr, "metaq tail: "+format+"\n", args...)
}

func (t *tailer) closeFiles() {
	for _, tf := range t.files {
		tf.f.Close()
	}
}

// scan expands the patterns: it opens the files that newly match, marks
// those no longer matched as gone, notices truncation, and closes the
// gone files read to their end.
func (t *tailer) scan() error {
	seen := map[string]bool{}
	for _, p := range t.cfg.patterns {
		matches, _ := filepath.Glob(p) // checked at start: ErrBadPattern is the only error
		if len(matches) == 0 && t.first {
			fmt.Fprintf(t.e.stderr, "metaq tail: %s: no such file yet; waiting for it\n", p)
		}
		for _, m := range matches {
			if err := t.track(m, seen); err != nil {
				return err
			}
		}
	}
	if t.first {
		t.resumeRenamed(seen)
	}
	for key, tf := range t.files {
		if seen[key] {
			continue
		}
		if !tf.gone {
			tf.gone = true
			tf.grew = time.Now() // the rotation's grace starts now
		}
		if tf.eof && len(tf.buf) == 0 && tf.acked == tf.readOff && time.Since(tf.grew) >= t.cfg.recordWait {
			tf.f.Close()
			delete(t.files, key)
		}
	}
	return nil
}

// track opens path, or updates the file it names.
func (t *tailer) track(path string, seen map[string]bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil // gone between the glob and the stat
	}
	if !fi.Mode().IsRegular() {
		t.warnOnce("dir:"+path, "%s is not a regular file; skipped", path)
		return nil
	}
	dev, ino := fileIdentity(fi)
	key := identityKey(path, dev, ino)
	if seen[key] {
		return nil
	}
	seen[key] = true
	tf := t.files[key]
	if tf == nil {
		if ext := compressedExt(path); ext != "" {
			t.warnOnce("compressed:"+path, "%s is compressed (%s): skipped (metaq tail ships text lines)", path, ext)
			return nil
		}
	}
	if tf != nil {
		if tf.path != path {
			tf.path = path
			t.setHeaders(tf)
		}
		tf.gone = false
		if fi.Size() == tf.size {
			return nil
		}
		tf.size = fi.Size()
		// Truncated: shorter than what was read, or (truncated and written
		// again between two looks) no longer starting with the same bytes.
		if fi.Size() < tf.readOff || !matchesFingerprint(tf.f, tailFileState{FpLen: tf.fpLen, FpCRC: tf.fpCRC}) {
			fmt.Fprintf(t.e.stderr, "metaq tail: %s was truncated (%d bytes, was read up to %d): reading it again from its start\n", path, fi.Size(), tf.readOff)
			tf.readOff, tf.bufOff, tf.buf, tf.acked, tf.eof = 0, 0, nil, 0, false
			tf.fpLen, tf.fpCRC, _ = fingerprint(tf.f, fi.Size())
		}
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		if t.first {
			return fmt.Errorf("cannot read %s: %w", path, err)
		}
		t.warnOnce("open:"+key, "cannot read %s: %v; skipped until it changes", path, err)
		return nil
	}
	delete(t.warned, "open:"+key)
	return t.open(f, path, key, dev, ino, fi.Size(), false)
}

// open starts following f, at its saved position if the state file knows
// it (and it still starts with the same bytes).
func (t *tailer) open(f *os.File, path, key string, dev, ino uint64, size int64, gone bool) error {
	if kind := compressedMagic(f); kind != "" {
		f.Close()
		t.warnOnce("compressed:"+key, "%s is compressed (%s data): skipped (metaq tail ships text lines)", path, kind)
		return nil
	}
	tf := &tailFile{key: key, dev: dev, ino: ino, path: path, f: f, grew: time.Now(), gone: gone}
	t.setHeaders(tf)
	if rs, ok := t.resume[key]; ok {
		delete(t.resume, key)
		switch {
		case rs.Offset > size:
			fmt.Fprintf(t.e.stderr, "metaq tail: %s is shorter (%d bytes) than its saved position %d: truncated, reading it from its start\n", path, size, rs.Offset)
		case !matchesFingerprint(f, rs):
			fmt.Fprintf(t.e.stderr, "metaq tail: %s does not start with the bytes saved for its inode: a new file, reading it from its start\n", path)
		default:
			tf.readOff, tf.bufOff, tf.acked = rs.Offset, rs.Offset, rs.Offset
		}
	} else if t.first && t.cfg.fromEnd {
		tf.readOff, tf.bufOff, tf.acked = size, size, size
	}
	var err error
	if tf.fpLen, tf.fpCRC, err = fingerprint(f, size); err != nil {
		f.Close()
		if t.first {
			return fmt.Errorf("cannot read %s: %w", path, err)
		}
		t.warnOnce("open:"+key, "cannot read %s: %v; skipped until it changes", path, err)
		return nil
	}
	t.files[key] = tf
	return nil
}

// resumeRenamed looks for the files of the state file that no pattern
// matches any more (renamed by a rotation while the shipper was stopped)
// in their directory, by identity, and reads them to their end.
func (t *tailer) resumeRenamed(seen map[string]bool) {
	for key, rs := range t.resume {
		if seen[key] || (rs.Dev == 0 && rs.Ino == 0) {
			continue
		}
		dir := filepath.Dir(rs.Path)
		ents, _ := os.ReadDir(dir)
		found := false
		for _, de := range ents {
			p := filepath.Join(dir, de.Name())
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if dev, ino := fileIdentity(fi); dev == rs.Dev && ino == rs.Ino {
				if f, err := os.Open(p); err == nil {
					found = true
					fmt.Fprintf(t.e.stderr, "metaq tail: %s was renamed to %s: reading it to its end\n", rs.Path, p)
					_ = t.open(f, p, key, rs.Dev, rs.Ino, fi.Size(), true)
				}
				break
			}
		}
		if !found {
			delete(t.resume, key)
			fmt.Fprintf(t.e.stderr, "metaq tail: %s, shipped up to offset %d, is gone (deleted, or moved out of its directory): anything it held past that was not shipped\n", rs, rs.Offset)
		}
	}
}

// compressedExt returns the extension of path if it is one of a
// compressed file (logrotate's compress makes app.log.1.gz), else "".
func compressedExt(path string) string {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".gz", ".tgz", ".bz2", ".xz", ".lz4", ".lzma", ".zst", ".zip", ".z":
		return ext
	}
	return ""
}

// compressedMagic returns the format of f if its first bytes are a
// compressed file's magic number, else "". A file that starts with a
// line of text never matches: each magic holds a control byte, or (bzip2)
// a 10-byte header that no log line begins with.
func compressedMagic(f *os.File) string {
	var b [10]byte
	n, _ := f.ReadAt(b[:], 0)
	h := b[:n]
	switch {
	case len(h) >= 2 && h[0] == 0x1f && (h[1] == 0x8b || h[1] == 0x9d):
		return "gzip"
	case len(h) >= 6 && string(h[:6]) == "\xfd7zXZ\x00":
		return "xz"
	case len(h) >= 4 && string(h[:4]) == "\x28\xb5\x2f\xfd":
		return "zstd"
	case len(h) >= 4 && string(h[:4]) == "\x04\x22\x4d\x18":
		return "lz4"
	case len(h) >= 10 && string(h[:3]) == "BZh" && h[3] >= '1' && h[3] <= '9' && string(h[4:10]) == "\x31\x41\x59\x26\x53\x59":
		return "bzip2"
	case len(h) >= 4 && string(h[:4]) == "PK\x03\x04":
		return "zip"
	}
	return ""
}

func (t *tailer) setHeaders(tf *tailFile) {
	tf.headers = message.Headers{{Key: "file", Value: []byte(tf.path)}, {Key: "host", Value: []byte(t.cfg.host)}}
	switch t.cfg.keyFrom {
	case "file":
		tf.msgKey = []byte(tf.path)
	case "host":
		tf.msgKey = t.hdrKey
	}
}

// fill reads up to readChunk bytes more of tf.
func (tf *tailFile) fill() (int, error) {
	if cap(tf.buf)-len(tf.buf) < readChunk {
		// A new array: records cut from the old one still alias it.
		nb := make([]byte, len(tf.buf), 2*len(tf.buf)+readChunk)
		copy(nb, tf.buf)
		tf.buf = nb
	}
	n, err := tf.f.ReadAt(tf.buf[len(tf.buf):len(tf.buf)+readChunk], tf.readOff)
	tf.buf = tf.buf[:len(tf.buf)+n]
	tf.readOff += int64(n)
	if n > 0 {
		tf.grew = time.Now()
		tf.eof = false
	}
	if errors.Is(err, io.EOF) {
		err = nil
		if n == 0 {
			tf.eof = true
		}
	}
	return n, err
}

// take cuts up to max records of tf into the batch, reading more of the
// file while its buffer holds no complete record. *room is how many bytes
// of records the batch may still take: a record longer than that is left
// in tf's buffer for the next batch, unless the batch is empty (then it is
// a batch of its own).
func (t *tailer) take(tf *tailFile, batch []*tailRecord, max int, room *int) []*tailRecord {
	read := false // read and found nothing new
	for max > 0 && *room > 0 {
		idle := time.Since(tf.grew) >= t.cfg.recordWait
		final := tf.eof && (t.cfg.once || tf.gone && idle)
		rec, n, split := t.split.next(tf.buf, final, idle && tf.eof)
		if n == 0 {
			if read {
				return batch
			}
			got, err := tf.fill()
			if err != nil {
				t.warnOnce("read:"+tf.key, "reading %s: %v", tf.path, err)
				return batch
			}
			read = got == 0 // at the end: one more look, as final may now hold
			continue
		}
		if len(rec) > *room && len(batch) > 0 {
			return batch
		}
		*room -= len(rec)
		if split && !tf.cutting {
			fmt.Fprintf(t.e.stderr, "metaq tail: %s offset %d: record longer than --max-record %d bytes: cut into several messages\n", tf.path, tf.bufOff, t.cfg.maxRecord)
		}
		tf.cutting = split // the pieces after the first are not reported
		tf.buf = tf.buf[n:]
		tf.bufOff += int64(n)
		m := &message.Message{Topic: t.cfg.topic, Body: rec, Headers: tf.headers, Key: tf.msgKey}
		batch = append(batch, &tailRecord{tf: tf, end: tf.bufOff, m: m})
		max--
	}
	return batch
}

// collect takes up to --batch records and --batch-bytes bytes of them,
// in turns from every file.
func (t *tailer) collect() []*tailRecord {
	files := make([]*tailFile, 0, len(t.files))
	for _, tf := range t.files {
		files = append(files, tf)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	var batch []*tailRecord
	room := t.cfg.batchBytes
	for {
		before := len(batch)
		quota := max(1, (t.cfg.batch-len(batch))/max(1, len(files)))
		for _, tf := range files {
			if len(batch) >= t.cfg.batch || room <= 0 {
				return batch
			}
			batch = t.take(tf, batch, min(quota, t.cfg.batch-len(batch)), &room)
		}
		if len(batch) == before || len(batch) >= t.cfg.batch || room <= 0 {
			return batch
		}
	}
}

// drained reports whether every file was read to its end and cut into
// records (--once is done).
func (t *tailer) drained() bool {
	for _, tf := range t.files {
		if !tf.eof || len(tf.buf) > 0 {
			return false
		}
	}
	return true
}

// loop reads and ships until the context is done, or with --once until
// the files are drained.
func (t *tailer) loop() error {
	e := t.e
	lastScan := time.Now()
	pausedSaid := false
	for e.ctx.Err() == nil {
		if n := t.cl.SpoolBacklog(); n >= t.cfg.spoolMax {
			if !pausedSaid {
				fmt.Fprintf(e.stderr, "metaq tail: the spool holds %d messages (--spool-max %d): reading paused until the broker takes them\n", n, t.cfg.spoolMax)
				pausedSaid = true
			}
			if t.cfg.once {
				return fmt.Errorf("the spool holds %d messages (--spool-max %d): stopped before the files' end", n, t.cfg.spoolMax)
			}
			_ = backoff.Sleep(e.ctx, t.cfg.poll)
			continue
		}
		pausedSaid = false
		if time.Since(lastScan) >= t.cfg.poll {
			if err := t.scan(); err != nil {
				return err
			}
			lastScan = time.Now()
		}
		batch := t.collect()
		if len(batch) == 0 {
			if t.cfg.once && t.drained() {
				return nil
			}
			_ = backoff.Sleep(e.ctx, t.cfg.poll)
			if err := t.scan(); err != nil {
				return err
			}
			lastScan = time.Now()
			continue
		}
		if err := t.ship(batch); err != nil {
			return err
		}
		if err := t.save(); err != nil {
			return err
		}
	}
	return nil
}

// fatalSend reports whether a send's error will not go away by trying
// again.
func fatalSend(err error) bool {
	var be *client.BrokerError
	switch {
	case errors.Is(err, client.ErrUnknownTopic), errors.Is(err, client.ErrInvalidMessage), errors.Is(err, client.ErrUnauthorized):
		return true
	case errors.As(err, &be):
		return be.Code < 500
	}
	return false
}

// ship sends the batch and waits until every record is acknowledged (or
// spooled), trying failed ones again; then it advances the files'
// acknowledged positions. On an error that trying again cannot fix, or
// SIGINT while trying again, it advances each file's position over the
// records acknowledged in order before its first failure.
func (t *tailer) ship(batch []*tailRecord) error {
	pending := batch
	bo := backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	var fatal error
	for attempt := 0; len(pending) > 0; attempt++ {
		var wg sync.WaitGroup
		wg.Add(len(pending))
		for _, r := range pending {
			r.err = nil
			t.cl.Produce(context.Background(), r.m, func(res client.SendResult, err error) {
				r.res, r.err = res, err
				wg.Done()
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), t.e.timeout+5*time.Second)
		_ = t.cl.Flush(ctx)
		cancel()
		wg.Wait()
		var failed []*tailRecord
		for _, r := range pending {
			if r.err != nil {
				failed = append(failed, r)
				if fatalSend(r.err) && fatal == nil {
					fatal = fmt.Errorf("%s offset %d: %w", r.tf.path, r.end, r.err)
				}
			}
		}
		pending = failed
		if len(pending) == 0 || fatal != nil {
			break
		}
		fmt.Fprintf(t.e.stderr, "metaq tail: %d of %d records failed (%v); trying again\n", len(pending), len(batch), pending[0].err)
		if backoff.Sleep(t.e.ctx, bo.Delay(attempt)) != nil {
			break
		}
	}
	blocked := map[*tailFile]bool{}
	for _, r := range batch {
		if r.err != nil {
			blocked[r.tf] = true
			continue
		}
		if !blocked[r.tf] {
			r.tf.acked = r.end
		}
		t.records++
		t.bytes += int64(len(r.m.Body))
		if r.res.Spooled {
			t.spooled++
		}
	}
	if fatal != nil {
		return fatal
	}
	if len(pending) > 0 {
		return fmt.Errorf("stopped with %d records of the last batch not acknowledged (they are shipped again by the next run)", len(pending))
	}
	return nil
}

// save writes the acknowledged positions to the state file.
func (t *tailer) save() error {
	st := &tailState{Version: tailStateVersion, Topic: t.cfg.topic}
	for _, tf := range t.files {
		if tf.fpLen < fpMax && tf.readOff > tf.fpLen {
			if n, crc, err := fingerprint(tf.f, tf.readOff); err == nil {
				tf.fpLen, tf.fpCRC = n, crc
			}
		}
		st.Files = append(st.Files, tailFileState{Path: tf.path, Dev: tf.dev, Ino: tf.ino, Offset: tf.acked, FpLen: tf.fpLen, FpCRC: tf.fpCRC})
	}
	// Files of the state file not opened yet (a glob that matches them no
	// more at this moment) keep their positions.
	for _, rs := range t.resume {
		st.Files = append(st.Files, rs)
	}
	sort.Slice(st.Files, func(i, j int) bool { return st.Files[i].Path < st.Files[j].Path })
	if err := saveTailState(t.cfg.state, st); err != nil {
		return fmt.Errorf("saving the state file %s: %w", t.cfg.state, err)
	}
	return nil
}
