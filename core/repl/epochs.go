package repl

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/fsutil"
)

// The leader-epoch checkpoint of a failover member (Kafka's
// leader-epoch-checkpoint; docs/replication.md, Failover): data_dir/epochs
// lists, for every epoch whose records this data directory holds, the
// offset of each partition at which that epoch's records start. A member
// that becomes the holder of epoch E records its own ends (before it
// acknowledges anything in E); a slave that starts copying from a holder
// records the holder's entries for the epochs after its own last one.
// A former holder rejoining as a slave asks the holder where the first
// epoch after its last one starts and cuts each partition there.
//
// The file is text, rewritten whole (temp file, fsync, rename, directory
// fsync):
//
//	metaq-epochs 1
//	epoch <E> held|copied
//	start <topic> <partition> <offset>
//	...

const (
	EpochsFile   = "epochs"
	epochsHeader = "metaq-epochs 1"
	// maxEpochEntries bounds the file: older epochs are dropped (a rejoin
	// needs the last few).
	maxEpochEntries = 64
)

// PartKey names a partition.
type PartKey struct {
	Topic string
	P     int32
}

func (k PartKey) String() string { return k.Topic + "-" + strconv.Itoa(int(k.P)) }

// EpochEntry is where epoch Epoch starts in each partition.
type EpochEntry struct {
	Epoch  int64
	Held   bool // this member held it (else it copied its records)
	Starts map[PartKey]int64
}

// EpochBook is the parsed file, entries in ascending epoch order.
type EpochBook struct {
	entries []EpochEntry
}

// Last is the highest epoch recorded (0: none).
func (eb *EpochBook) Last() int64 {
	if len(eb.entries) == 0 {
		return 0
	}
	return eb.entries[len(eb.entries)-1].Epoch
}

// FirstAfter returns the entry of the lowest epoch above e.
func (eb *EpochBook) FirstAfter(e int64) (EpochEntry, bool) {
	for _, en := range eb.entries {
		if en.Epoch > e {
			return en, true
		}
	}
	return EpochEntry{}, false
}

// UpTo returns a copy with the entries of epochs <= e.
func (eb *EpochBook) UpTo(e int64) *EpochBook {
	out := &EpochBook{}
	for _, en := range eb.entries {
		if en.Epoch <= e {
			out.entries = append(out.entries, en)
		}
	}
	return out
}

// Add appends en, dropping any entry of an epoch >= en.Epoch.
func (eb *EpochBook) Add(en EpochEntry) {
	k := len(eb.entries)
	for k > 0 && eb.entries[k-1].Epoch >= en.Epoch {
		k--
	}
	eb.entries = append(eb.entries[:k], en)
	if n := len(eb.entries); n > maxEpochEntries {
		eb.entries = append([]EpochEntry(nil), eb.entries[n-maxEpochEntries:]...)
	}
}

// Format renders the file.
func (eb *EpochBook) Format() []byte {
	var b bytes.Buffer
	b.WriteString(epochsHeader + "\n")
	for _, en := range eb.entries {
		how := "copied"
		if en.Held {
			how = "held"
		}
		fmt.Fprintf(&b, "epoch %d %s\n", en.Epoch, how)
		for _, k := range sortedParts(en.Starts) {
			fmt.Fprintf(&b, "start %s %d %d\n", k.Topic, k.P, en.Starts[k])
		}
	}
	return b.Bytes()
}

func sortedParts(m map[PartKey]int64) []PartKey {
	ks := make([]PartKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].Topic != ks[j].Topic {
			return ks[i].Topic < ks[j].Topic
		}
		return ks[i].P < ks[j].P
	})
	return ks
}

// ParseEpochs parses the file's contents.
func ParseEpochs(data []byte) (*EpochBook, error) {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) == 0 || lines[0] != epochsHeader {
		return nil, fmt.Errorf("epochs: first line is not %q", epochsHeader)
	}
	eb := &EpochBook{}
	for i, line := range lines[1:] {
		f := strings.Fields(line)
		bad := func(why string) error { return fmt.Errorf("epochs: line %d %q: %s", i+2, line, why) }
		switch {
		case len(f) == 3 && f[0] == "epoch":
			e, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || e <= 0 {
				return nil, bad("bad epoch")
			}
			if f[2] != "held" && f[2] != "copied" {
				return nil, bad("want held or copied")
			}
			if n := len(eb.entries); n > 0 && eb.entries[n-1].Epoch >= e {
				return nil, bad("epochs must rise")
			}
			eb.entries = append(eb.entries, EpochEntry{Epoch: e, Held: f[2] == "held", Starts: map[PartKey]int64{}})
		case len(f) == 4 && f[0] == "start":
			if len(eb.entries) == 0 {
				return nil, bad("start before any epoch")
			}
			p, err1 := strconv.ParseInt(f[2], 10, 32)
			off, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 != nil || err2 != nil || p < 0 || off < 0 || !conf.ValidTopicName(f[1]) {
				return nil, bad("want start <topic> <partition> <offset>")
			}
			eb.entries[len(eb.entries)-1].Starts[PartKey{f[1], int32(p)}] = off
		default:
			return nil, bad("want epoch <E> held|copied or start <topic> <partition> <offset>")
		}
	}
	return eb, nil
}

// LoadEpochs reads data_dir/epochs (an empty book when there is none).
func LoadEpochs(dataDir string) (*EpochBook, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, EpochsFile))
	if errors.Is(err, os.ErrNotExist) {
		return &EpochBook{}, nil
	}
	if err != nil {
		return nil, err
	}
	eb, err := ParseEpochs(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dataDir, EpochsFile), err)
	}
	return eb, nil
}

// Save writes data_dir/epochs durably: a temp file, fsynced, renamed over
// it, and the directory fsynced.
func (eb *EpochBook) Save(dataDir string) error {
	path := filepath.Join(dataDir, EpochsFile)
	if err := fsutil.WriteFileDurable(path, eb.Format()); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// FormatStarts is the body of the answer to stats epoch-start:<E>: the
// epoch the starts are of (0: none after E is known), the epoch this
// holder holds, then one line per partition.
func FormatStarts(epoch, current int64, starts map[PartKey]int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "epoch %d %d\n", epoch, current)
	for _, k := range sortedParts(starts) {
		fmt.Fprintf(&b, "%s %d %d\n", k.Topic, k.P, starts[k])
	}
	return b.Bytes()
}

// ParseStarts parses FormatStarts' output.
func ParseStarts(body []byte) (epoch, current int64, starts map[PartKey]int64, err error) {
	lines := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
	f := strings.Fields(lines[0])
	if len(f) != 3 || f[0] != "epoch" {
		return 0, 0, nil, fmt.Errorf("epoch-start: first line %q is not epoch <E> <current>", ProtocolLine(lines[0]))
	}
	epoch, err1 := strconv.ParseInt(f[1], 10, 64)
	current, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || epoch < 0 || current <= 0 {
		return 0, 0, nil, fmt.Errorf("epoch-start: bad epochs in %q", ProtocolLine(lines[0]))
	}
	starts = map[PartKey]int64{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 3 {
			return 0, 0, nil, fmt.Errorf("epoch-start: bad line %q", ProtocolLine(line))
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || off < 0 || !conf.ValidTopicName(f[0]) {
			return 0, 0, nil, fmt.Errorf("epoch-start: bad line %q", ProtocolLine(line))
		}
		starts[PartKey{f[0], int32(p)}] = off
	}
	return epoch, current, starts, nil
}

// ProtocolLine cuts a line for an error message.
func ProtocolLine(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
