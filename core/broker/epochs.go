package broker

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
	epochsFile   = "epochs"
	epochsHeader = "metaq-epochs 1"
	// maxEpochEntries bounds the file: older epochs are dropped (a rejoin
	// needs the last few).
	maxEpochEntries = 64
)

// partKey names a partition.
type partKey struct {
	topic string
	p     int32
}

func (k partKey) String() string { return k.topic + "-" + strconv.Itoa(int(k.p)) }

// epochEntry is where epoch Epoch starts in each partition.
type epochEntry struct {
	Epoch  int64
	Held   bool // this member held it (else it copied its records)
	Starts map[partKey]int64
}

// epochBook is the parsed file, entries in ascending epoch order.
type epochBook struct {
	entries []epochEntry
}

// last is the highest epoch recorded (0: none).
func (eb *epochBook) last() int64 {
	if len(eb.entries) == 0 {
		return 0
	}
	return eb.entries[len(eb.entries)-1].Epoch
}

// firstAfter returns the entry of the lowest epoch above e.
func (eb *epochBook) firstAfter(e int64) (epochEntry, bool) {
	for _, en := range eb.entries {
		if en.Epoch > e {
			return en, true
		}
	}
	return epochEntry{}, false
}

// upTo returns a copy with the entries of epochs <= e.
func (eb *epochBook) upTo(e int64) *epochBook {
	out := &epochBook{}
	for _, en := range eb.entries {
		if en.Epoch <= e {
			out.entries = append(out.entries, en)
		}
	}
	return out
}

// add appends en, dropping any entry of an epoch >= en.Epoch.
func (eb *epochBook) add(en epochEntry) {
	k := len(eb.entries)
	for k > 0 && eb.entries[k-1].Epoch >= en.Epoch {
		k--
	}
	eb.entries = append(eb.entries[:k], en)
	if n := len(eb.entries); n > maxEpochEntries {
		eb.entries = append([]epochEntry(nil), eb.entries[n-maxEpochEntries:]...)
	}
}

// format renders the file.
func (eb *epochBook) format() []byte {
	var b bytes.Buffer
	b.WriteString(epochsHeader + "\n")
	for _, en := range eb.entries {
		how := "copied"
		if en.Held {
			how = "held"
		}
		fmt.Fprintf(&b, "epoch %d %s\n", en.Epoch, how)
		for _, k := range sortedParts(en.Starts) {
			fmt.Fprintf(&b, "start %s %d %d\n", k.topic, k.p, en.Starts[k])
		}
	}
	return b.Bytes()
}

func sortedParts(m map[partKey]int64) []partKey {
	ks := make([]partKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].topic != ks[j].topic {
			return ks[i].topic < ks[j].topic
		}
		return ks[i].p < ks[j].p
	})
	return ks
}

// parseEpochs parses the file's contents.
func parseEpochs(data []byte) (*epochBook, error) {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) == 0 || lines[0] != epochsHeader {
		return nil, fmt.Errorf("epochs: first line is not %q", epochsHeader)
	}
	eb := &epochBook{}
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
			eb.entries = append(eb.entries, epochEntry{Epoch: e, Held: f[2] == "held", Starts: map[partKey]int64{}})
		case len(f) == 4 && f[0] == "start":
			if len(eb.entries) == 0 {
				return nil, bad("start before any epoch")
			}
			p, err1 := strconv.ParseInt(f[2], 10, 32)
			off, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 != nil || err2 != nil || p < 0 || off < 0 || !conf.ValidTopicName(f[1]) {
				return nil, bad("want start <topic> <partition> <offset>")
			}
			eb.entries[len(eb.entries)-1].Starts[partKey{f[1], int32(p)}] = off
		default:
			return nil, bad("want epoch <E> held|copied or start <topic> <partition> <offset>")
		}
	}
	return eb, nil
}

// loadEpochs reads data_dir/epochs (an empty book when there is none).
func loadEpochs(dataDir string) (*epochBook, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, epochsFile))
	if errors.Is(err, os.ErrNotExist) {
		return &epochBook{}, nil
	}
	if err != nil {
		return nil, err
	}
	eb, err := parseEpochs(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dataDir, epochsFile), err)
	}
	return eb, nil
}

// save writes data_dir/epochs durably: a temp file, fsynced, renamed over
// it, and the directory fsynced.
func (eb *epochBook) save(dataDir string) error {
	path := filepath.Join(dataDir, epochsFile)
	if err := writeFileDurable(path, eb.format()); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// formatStarts is the body of the answer to stats epoch-start:<E>: the
// epoch the starts are of (0: none after E is known), the epoch this
// holder holds, then one line per partition.
func formatStarts(epoch, current int64, starts map[partKey]int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "epoch %d %d\n", epoch, current)
	for _, k := range sortedParts(starts) {
		fmt.Fprintf(&b, "%s %d %d\n", k.topic, k.p, starts[k])
	}
	return b.Bytes()
}

// parseStarts parses formatStarts' output.
func parseStarts(body []byte) (epoch, current int64, starts map[partKey]int64, err error) {
	lines := strings.Split(strings.TrimRight(string(body), "\n"), "\n")
	f := strings.Fields(lines[0])
	if len(f) != 3 || f[0] != "epoch" {
		return 0, 0, nil, fmt.Errorf("epoch-start: first line %q is not epoch <E> <current>", protocolLine(lines[0]))
	}
	epoch, err1 := strconv.ParseInt(f[1], 10, 64)
	current, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || epoch < 0 || current <= 0 {
		return 0, 0, nil, fmt.Errorf("epoch-start: bad epochs in %q", protocolLine(lines[0]))
	}
	starts = map[partKey]int64{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 3 {
			return 0, 0, nil, fmt.Errorf("epoch-start: bad line %q", protocolLine(line))
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || off < 0 || !conf.ValidTopicName(f[0]) {
			return 0, 0, nil, fmt.Errorf("epoch-start: bad line %q", protocolLine(line))
		}
		starts[partKey{f[0], int32(p)}] = off
	}
	return epoch, current, starts, nil
}

// protocolLine cuts a line for an error message.
func protocolLine(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
