package conf

import (
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits enforced by Validate.
const (
	MaxBrokerID         = 1023
	MaxPartitions       = 1024
	MaxTopicNameLen     = 200
	RecordHeaderSize    = 20      // bytes before each message body on disk and in get replies
	maxUnflushInterval  = 86400e3 // ms (1 day)
	maxDeleteCheck      = 86400   // s (1 day)
	minSegmentSize      = 4096
	minJournalFileSize  = 1 << 20
	maxJournalFileSize  = 1 << 30
	maxJournalCkptMs    = 3600e3 // ms (1 hour)
	maxTransferSizeCap  = 1 << 30
	minLineLength       = 64
	maxLineLengthCap    = 65536
	deletePolicyExample = `"delete,N" with N in hours, or "delete,Ns", "delete,Nm", "delete,Nh"`
)

// Problem is one configuration error.
type Problem struct {
	Key  string // e.g. "port", "topic[1].num_partitions" (0-based); "" if not tied to a key
	Line int    // 1-based line in the file, 0 if unknown
	Msg  string
}

// String formats the problem as "key: msg", or just msg when there is no key
// or msg is an unknown-key message, which quotes the key itself.
func (p Problem) String() string {
	if p.Key == "" || strings.HasPrefix(p.Msg, "unknown key "+strconv.Quote(p.Key)) {
		return p.Msg
	}
	return p.Key + ": " + p.Msg
}

// Error lists every problem found in a configuration.
type Error struct {
	File     string
	Problems []Problem
}

// Error prints one line per problem: "file[:line]: key: msg".
func (e *Error) Error() string {
	if len(e.Problems) == 0 {
		return e.File + ": invalid configuration"
	}
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
}

// newError sorts problems by line (those without a line last), keeping the
// order of problems on the same line.
func newError(file string, probs []Problem) *Error {
	sort.SliceStable(probs, func(i, j int) bool {
		li, lj := probs[i].Line, probs[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
	return &Error{File: file, Problems: probs}
}

// ErrBadTopicName is wrapped by ValidateTopicName's errors.
var ErrBadTopicName = errors.New("invalid topic name")

// TopicNameRule is the rule ValidateTopicName enforces, in words.
const TopicNameRule = `a topic name must be 1..200 bytes from [A-Za-z0-9_.-], and not "." or ".."`

// ValidTopicName reports whether s can be a topic name (ValidateTopicName).
func ValidTopicName(s string) bool { return ValidateTopicName(s) == nil }

// ValidateTopicName is the one topic-name rule of the broker: the TCP port
// (put with auto_create_topics), the JSON API and the dashboard, server.toml
// [[topic]] tables, topics.toml and the ZooKeeper registry all ask it. A
// topic name is 1..MaxTopicNameLen bytes from [A-Za-z0-9_.-] and is
// neither "." nor "..": it is a directory name (<topic>-<partition>) and a
// ZooKeeper node name (R/brokers/topics/<topic>), and ZooKeeper refuses "."
// and ".." as path components. The character set leaves out '/', NUL,
// every control character, every character ZooKeeper refuses
// (U+0001..U+001F, U+007F..U+009F, U+D800..U+F8FF, U+FFF0..U+FFFF) and
// invalid UTF-8. A leading '.' is allowed ("." and ".." are not).
//
// The error wraps ErrBadTopicName, quotes at most 64 bytes of the name
// (escaped, so control bytes never reach a log or reply), says what is
// wrong and states the rule; every door answers it as it is.
func ValidateTopicName(s string) error {
	if why := topicNameProblem(s); why != "" {
		return fmt.Errorf("%w %s: %s; %s", ErrBadTopicName, quoteName(s), why, TopicNameRule)
	}
	return nil
}

func topicNameProblem(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxTopicNameLen:
		return fmt.Sprintf("%d bytes, longer than %d", len(s), MaxTopicNameLen)
	case s == "." || s == "..":
		return "reserved (a path component ZooKeeper and the file system refuse)"
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return fmt.Sprintf("invalid UTF-8 at byte %d", i)
		case r == '/':
			return fmt.Sprintf("'/' (a path separator) at byte %d", i)
		case r <= 0x1f || (r >= 0x7f && r <= 0x9f):
			return fmt.Sprintf("control character %U at byte %d", r, i)
		case (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff):
			return fmt.Sprintf("%U at byte %d, which a ZooKeeper node name cannot hold", r, i)
		case unicode.IsPrint(r):
			return fmt.Sprintf("%q at byte %d is not allowed", r, i)
		}
		return fmt.Sprintf("%U at byte %d is not allowed", r, i)
	}
	return ""
}

// quoteName quotes at most the first 64 bytes of a name (never splitting
// a UTF-8 sequence), with "..." after it if it was cut: what
// sdk/protocol.Printable shows of client bytes.
func quoteName(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	b := s[:max]
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRuneInString(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return strconv.Quote(b) + "..."
}

// ParseDeletePolicy parses MetaQ's retention policy "delete,N[s|m|h]" (no
// unit = hours) into the age after which a segment is deleted. N must be >= 1.
func ParseDeletePolicy(s string) (time.Duration, error) {
	kind, arg, found := strings.Cut(strings.TrimSpace(s), ",")
	kind, arg = strings.TrimSpace(kind), strings.TrimSpace(arg)
	switch {
	case kind == "archive":
		return 0, fmt.Errorf("archive policy %q is not supported; use %s", s, deletePolicyExample)
	case kind != "delete" || !found:
		return 0, fmt.Errorf("invalid delete policy %q; use %s", s, deletePolicyExample)
	}
	unit := time.Hour
	switch {
	case strings.HasSuffix(arg, "s"):
		unit = time.Second
	case strings.HasSuffix(arg, "m"):
		unit = time.Minute
	case strings.HasSuffix(arg, "h"):
		unit = time.Hour
	}
	num := strings.TrimRight(arg, "smh")
	if len(arg)-len(num) > 1 || num == "" || strings.Trim(num, "0123456789") != "" {
		return 0, fmt.Errorf("invalid delete policy %q; use %s", s, deletePolicyExample)
	}
	n, err := strconv.ParseInt(num, 10, 64) // only digits: err means overflow
	switch {
	case err != nil || n > math.MaxInt64/int64(unit):
		return 0, fmt.Errorf("delete policy %q: retention time is out of range", s)
	case n < 1:
		return 0, fmt.Errorf("delete policy %q: retention time must be >= 1", s)
	}
	return time.Duration(n) * unit, nil
}

// checker accumulates validation problems.
type checker struct {
	c     *Config
	probs []Problem
}

func (k *checker) add(key, format string, args ...any) {
	k.probs = append(k.probs, Problem{Key: key, Line: k.c.line(key), Msg: fmt.Sprintf(format, args...)})
}

func (k *checker) intRange(key string, v, lo, hi int64) bool {
	switch {
	case v < lo && hi == math.MaxInt64:
		k.add(key, "must be >= %d, got %d", lo, v)
	case v < lo || v > hi:
		k.add(key, "must be between %d and %d, got %d", lo, hi, v)
	default:
		return true
	}
	return false
}

func (k *checker) min(key string, v, lo int64) bool { return k.intRange(key, v, lo, math.MaxInt64) }

func (k *checker) policy(key, s string) {
	if _, err := ParseDeletePolicy(s); err != nil {
		k.add(key, "%v", err)
	}
}

func (k *checker) dataDir(key, s string) {
	if strings.TrimSpace(s) == "" {
		k.add(key, "must not be empty")
	}
}

// check validates c and returns every problem found.
func (c *Config) check() []Problem {
	k := &checker{c: c}
	k.intRange("broker_id", int64(c.BrokerID), 0, MaxBrokerID)
	k.host(c.Host)
	k.intRange("port", int64(c.Port), 0, 65535)
	k.dataDir("data_dir", c.DataDir)
	k.intRange("num_partitions", int64(c.NumPartitions), 1, MaxPartitions)
	k.min("unflush_threshold", int64(c.UnflushThreshold), 0)
	k.intRange("unflush_interval", int64(c.UnflushInterval), 0, maxUnflushInterval)
	k.min("max_segment_size", c.MaxSegmentSize, minSegmentSize)
	if c.Recovery != RecoveryQuarantine && c.Recovery != RecoveryTruncate {
		k.add("recovery", "must be %q or %q, got %q", RecoveryQuarantine, RecoveryTruncate, c.Recovery)
	}
	k.intRange("journal_file_size", c.JournalFileSize, minJournalFileSize, maxJournalFileSize)
	k.min("journal_checkpoint_bytes", c.JournalCheckpointBytes, minJournalFileSize)
	k.intRange("journal_checkpoint_interval", int64(c.JournalCheckpointInterval), 10, maxJournalCkptMs)
	if c.JournalCheckpointSync != CheckpointSyncAuto && c.JournalCheckpointSync != CheckpointSyncFsync {
		k.add("journal_checkpoint_sync", "must be %q or %q, got %q", CheckpointSyncAuto, CheckpointSyncFsync, c.JournalCheckpointSync)
	}
	if c.JournalFdatasync != JournalFdatasyncAuto && c.JournalFdatasync != JournalFdatasyncBlocking {
		k.add("journal_fdatasync", "must be %q or %q, got %q", JournalFdatasyncAuto, JournalFdatasyncBlocking, c.JournalFdatasync)
	}
	k.transactions(c)
	k.replication(c)
	okT := k.intRange("max_transfer_size", int64(c.MaxTransferSize), RecordHeaderSize+1, maxTransferSizeCap)
	okM := k.min("max_message_size", int64(c.MaxMessageSize), 1)
	if okT && okM && int64(c.MaxMessageSize)+RecordHeaderSize > int64(c.MaxTransferSize) {
		k.add("max_message_size", "plus the %d-byte record header must be <= max_transfer_size (%d), got %d",
			RecordHeaderSize, c.MaxTransferSize, c.MaxMessageSize)
	}
	k.intRange("max_line_length", int64(c.MaxLineLength), minLineLength, maxLineLengthCap)
	k.intRange("idempotent_producers", int64(c.IdempotentProducers), 1, 1_000_000)
	k.intRange("idempotent_idle_expiry", int64(c.IdempotentIdleExpiry), 60, 30*86400)
	k.intRange("idempotent_rebuild_bytes", c.IdempotentRebuildBytes, 1<<20, 1<<30)
	k.intRange("idempotent_memory", c.IdempotentMemory, 64<<10, 1<<40)
	k.policy("delete_policy", c.DeletePolicy)
	k.intRange("delete_check_interval", int64(c.DeleteCheckInterval), 1, maxDeleteCheck)
	if r := c.DiskMaxUsedRatio; !(r > 0 && r <= 1) { // NaN too
		k.add("disk_max_used_ratio", "must be a fraction greater than 0 and at most 1 (0.90 = 90%%; 1 = never refuse puts), got %v", r)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		k.add("log_level", "must be one of debug, info, warn, error, got %q", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		k.add("log_format", `must be "text" or "json", got %q`, c.LogFormat)
	}

	k.checkPlugins(c)
	k.zookeeper(&c.ZooKeeper)
	k.security(c)
	k.http(c)
	k.delay(c)

	if len(c.Topics) == 0 && !c.AutoCreateTopics {
		k.add("topic", "at least one [[topic]] is required unless auto_create_topics = true")
	}
	first := map[string]int{}
	for i := range c.Topics {
		k.topic(i, &c.Topics[i], first)
	}
	return k.probs
}

func (k *checker) host(h string) {
	switch {
	case h == "":
		k.add("host", `must not be empty (use "0.0.0.0" to listen on all interfaces)`)
	case strings.ContainsAny(h, " \t\r\n[]/"):
		k.add("host", "must be a host name or IP address, got %q", h)
	case strings.Contains(h, ":") && net.ParseIP(h) == nil:
		k.add("host", "must not include a port (set port instead), got %q", h)
	}
}

func (k *checker) topic(i int, t *Topic, first map[string]int) {
	p := fmt.Sprintf("topic[%d].", i)
	switch {
	case t.Name == "":
		k.add(p+"name", "is required")
	case t.Name == "*":
		k.add(p+"name", `wildcard topic "*" is not supported; set auto_create_topics = true (top-level settings apply to unconfigured topics)`)
	default:
		if err := ValidateTopicName(t.Name); err != nil {
			k.add(p+"name", "%v", err)
			break
		}
		if j, dup := first[t.Name]; dup {
			k.add(p+"name", "duplicate topic %q (first declared as topic[%d])", t.Name, j)
		} else {
			first[t.Name] = i
		}
	}
	if t.NumPartitions != nil {
		k.intRange(p+"num_partitions", int64(*t.NumPartitions), 1, MaxPartitions)
	}
	if t.UnflushThreshold != nil {
		k.min(p+"unflush_threshold", int64(*t.UnflushThreshold), 0)
	}
	if t.UnflushInterval != nil {
		k.intRange(p+"unflush_interval", int64(*t.UnflushInterval), 0, maxUnflushInterval)
	}
	if t.DataDir != nil {
		k.dataDir(p+"data_dir", *t.DataDir)
	}
	if t.DeletePolicy != nil {
		k.policy(p+"delete_policy", *t.DeletePolicy)
	}
	k.checkFilters(p, t.Filters)
}

func (k *checker) zookeeper(z *ZooKeeper) {
	if z.Connect != "" {
		switch {
		case strings.Contains(z.Connect, "/"):
			k.add("zookeeper.connect", "must not have a chroot suffix (set zookeeper.root instead), got %q", z.Connect)
		case len(z.Servers()) == 0:
			k.add("zookeeper.connect", `must be "host:port[,host:port...]", got %q`, z.Connect)
		}
	}
	switch {
	case !strings.HasPrefix(z.Root, "/"):
		k.add("zookeeper.root", `must start with "/", got %q`, z.Root)
	case len(z.Root) > 1 && strings.HasSuffix(z.Root, "/"):
		k.add("zookeeper.root", `must not end with "/", got %q`, z.Root)
	case strings.Contains(z.Root, "//"):
		k.add("zookeeper.root", `must not contain an empty path element, got %q`, z.Root)
	}
	k.min("zookeeper.session_timeout", int64(z.SessionTimeout), 1000)
	k.min("zookeeper.connection_timeout", int64(z.ConnectionTimeout), 1000)
}
