// Package diskwatch is the broker's disk watermark (disk_max_used_ratio,
// RocketMQ's diskMaxUsedSpaceRatio).
package diskwatch

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"
)

// Every distinct data directory (data_dir and each
// topic's data_dir) is a Disk whose file system is measured with
// statfs by one goroutine, once every diskCheckInterval and right after a
// write fails with ENOSPC or retention deletes segments. A put only loads
// its topic's disk's full flag: never a statfs per put. Above the ratio,
// puts and mputs to the topics on that disk are refused before anything is
// appended (nothing is acknowledged); reads, offsets, commits and
// retention are untouched, and the next check after space is freed clears
// the flag, so puts resume by themselves.

const (
	// CheckInterval is how often every data directory is measured.
	CheckInterval = time.Second
	// minKickGap spaces the extra checks that failed writes ask for, so a
	// burst of ENOSPC failures costs one statfs per data directory per gap.
	minKickGap = 10 * time.Millisecond
)

// Watch is the broker's set of data disks.
type Watch struct {
	maxBits atomic.Uint64 // disk_max_used_ratio, math.Float64bits (Reload changes it)
	every   time.Duration // CheckInterval; tests set it longer
	logf    func(format string, args ...any)
	// kick asks the watcher for a check now (ENOSPC, retention).
	kick chan struct{}
	// Rejects counts puts and mputs refused because their disk was full
	// (the broker counts them).
	Rejects atomic.Int64

	mu    sync.Mutex
	disks map[string]*Disk // by cleaned directory
}

// Disk is one data directory and the last measure of its file system.
type Disk struct {
	dir  string // as configured, cleaned
	full atomic.Bool
	last atomic.Pointer[Usage]
}

// Dir is the directory, cleaned.
func (d *Disk) Dir() string { return d.dir }

// Full reports whether the disk is over the ratio: a put loads only this.
func (d *Disk) Full() bool { return d.full.Load() }

// Last is the last measure, nil before the first.
func (d *Disk) Last() *Usage { return d.last.Load() }

// Usage is one statfs of a data directory.
type Usage struct {
	Space  float64 // used / (used + available) blocks, as df's Use%
	Inodes float64 // used / total inodes; 0 where the file system has no count
	Err    error   // statfs failed: the disk is not marked full for it
	// UsedBytes and FreeBytes are as df counts them: used blocks, and
	// blocks available to unprivileged users.
	UsedBytes, FreeBytes uint64
}

// New returns a watch refusing puts above max (disk_max_used_ratio),
// logging changes with logf. Run measures.
func New(max float64, logf func(string, ...any)) *Watch {
	w := &Watch{every: CheckInterval, logf: logf, kick: make(chan struct{}, 1), disks: map[string]*Disk{}}
	w.SetMax(max)
	return w
}

// MaxRatio is disk_max_used_ratio; SetMax changes it (Reload, which then
// wakes the watcher to judge every disk again).
func (w *Watch) MaxRatio() float64 { return math.Float64frombits(w.maxBits.Load()) }

// SetMax sets disk_max_used_ratio.
func (w *Watch) SetMax(r float64) { w.maxBits.Store(math.Float64bits(r)) }

// Disk returns the Disk of directory dir, adding it (and measuring it
// once) if it is new.
func (w *Watch) Disk(dir string) *Disk {
	dir = filepath.Clean(dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disks[dir]
	if d == nil {
		d = &Disk{dir: dir}
		w.disks[dir] = d
		w.measure(d)
	}
	return d
}

// List returns the disks sorted by directory.
func (w *Watch) List() []*Disk {
	w.mu.Lock()
	out := make([]*Disk, 0, len(w.disks))
	for _, d := range w.disks {
		out = append(out, d)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out
}

// checkAll measures every disk.
func (w *Watch) checkAll() {
	for _, d := range w.List() {
		w.measure(d)
	}
}

// Wake asks for a check soon, without blocking.
func (w *Watch) Wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// WakeOn asks for a check when err says the disk (or a quota) is full.
func (w *Watch) WakeOn(err error) {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		w.Wake()
	}
}

// Run measures every disk every CheckInterval and when woken, until done
// is closed.
func (w *Watch) Run(done <-chan struct{}) {
	tk := time.NewTicker(w.every)
	defer tk.Stop()
	var lastKick time.Time
	for {
		select {
		case <-done:
			return
		case <-tk.C:
		case <-w.kick:
			if wait := minKickGap - time.Since(lastKick); wait > 0 {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
			}
			lastKick = time.Now()
		}
		w.checkAll()
	}
}

// measure runs statfs on d's directory (or, before the directory exists,
// its nearest existing parent: the same file system once it is created),
// stores the usage and sets or clears d.full, logging changes.
func (w *Watch) measure(d *Disk) {
	u := statDisk(d.dir)
	prev := d.last.Swap(u)
	full := u.Err == nil && (u.Space > w.MaxRatio() || u.Inodes > w.MaxRatio())
	was := d.full.Swap(full)
	switch {
	case full && !was:
		w.logf("%s; refusing puts to its topics", w.fullMessage(d, u))
	case !full && was:
		w.logf("data_dir %s is %s used again, inodes %s: at most disk_max_used_ratio %s; accepting puts",
			showDir(d.dir), percent(u.Space), percent(u.Inodes), ratio(w.MaxRatio()))
	}
	if u.Err != nil && (prev == nil || prev.Err == nil || prev.Err.Error() != u.Err.Error()) {
		w.logf("disk watermark: %v (puts to its topics are not refused for it)", u.Err)
	}
}

// statDisk measures the file system of dir.
func statDisk(dir string) *Usage {
	var st unix.Statfs_t
	p := dir
	for {
		err := unix.Statfs(p, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) || parent == p {
			return &Usage{Err: fmt.Errorf("statfs %s: %w", showDir(p), err)}
		}
		p = parent
	}
	u := &Usage{}
	// As df: blocks reserved for root count as neither used nor available.
	if used, avail := st.Blocks-st.Bfree, st.Bavail; used+avail > 0 {
		u.Space = float64(used) / float64(used+avail)
	}
	u.UsedBytes, u.FreeBytes = (st.Blocks-st.Bfree)*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
	if st.Files > 0 && st.Ffree <= st.Files {
		u.Inodes = float64(st.Files-st.Ffree) / float64(st.Files)
	}
	return u
}

// fullMessage is the error a put to a full disk gets, without the advice.
func (w *Watch) fullMessage(d *Disk, u *Usage) string {
	if u == nil {
		u = &Usage{}
	}
	if u.Space <= w.MaxRatio() && u.Inodes > w.MaxRatio() {
		return "disk full: data_dir " + showDir(d.dir) + " has " + percent(u.Inodes) +
			" of its inodes used, over disk_max_used_ratio " + ratio(w.MaxRatio())
	}
	return "disk full: data_dir " + showDir(d.dir) + " is " + percent(u.Space) +
		" used, over disk_max_used_ratio " + ratio(w.MaxRatio())
}

// Refusal is the reply to a put to the full disk d.
func (w *Watch) Refusal(d *Disk) string {
	return w.fullMessage(d, d.last.Load()) + "; puts resume when space is freed"
}

// MaxUsed is the highest space ratio of the disks measured without error.
func (w *Watch) MaxUsed() float64 {
	var m float64
	for _, d := range w.List() {
		if u := d.last.Load(); u != nil && u.Err == nil {
			m = max(m, u.Space)
		}
	}
	return m
}

// WriteStats answers `stats disks`: one line per data directory.
func (w *Watch) WriteStats(sb *strings.Builder) {
	sb.WriteString("STATS\r\n")
	for _, d := range w.List() {
		u := d.last.Load()
		if u == nil {
			continue
		}
		if u.Err != nil {
			fmt.Fprintf(sb, "%s error %s\r\n", showDir(d.dir), oneLine.Replace(u.Err.Error()))
			continue
		}
		fmt.Fprintf(sb, "%s used_ratio %.4f inodes_used_ratio %.4f full %t\r\n", showDir(d.dir), u.Space, u.Inodes, d.full.Load())
	}
	sb.WriteString("END\r\n")
}

// oneLine turns the line breaks of an error into spaces.
var oneLine = strings.NewReplacer("\r", " ", "\n", " ")

// percent renders a ratio as a percentage with one decimal: "93.1%".
func percent(r float64) string { return strconv.FormatFloat(r*100, 'f', 1, 64) + "%" }

// ratio renders disk_max_used_ratio with at least two decimals: "0.90".
func ratio(r float64) string {
	s := strconv.FormatFloat(r, 'f', -1, 64)
	if i := strings.IndexByte(s, '.'); i < 0 {
		s += ".00"
	} else if len(s)-i < 3 {
		s += strings.Repeat("0", 3-(len(s)-i))
	}
	return s
}

// showDir renders a directory for a reply or log line: as is when it is
// printable without spaces, quoted otherwise.
func showDir(dir string) string {
	if strings.IndexFunc(dir, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) < 0 {
		return dir
	}
	return strconv.Quote(dir)
}
