package broker

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

// The disk watermark (disk_max_used_ratio, RocketMQ's
// diskMaxUsedSpaceRatio). Every distinct data directory (data_dir and each
// topic's data_dir) is a dataDisk whose file system is measured with
// statfs by one goroutine, once every diskCheckInterval and right after a
// write fails with ENOSPC or retention deletes segments. A put only loads
// its topic's disk's full flag: never a statfs per put. Above the ratio,
// puts and mputs to the topics on that disk are refused before anything is
// appended (nothing is acknowledged); reads, offsets, commits and
// retention are untouched, and the next check after space is freed clears
// the flag, so puts resume by themselves.

const (
	// diskCheckInterval is how often every data directory is measured.
	diskCheckInterval = time.Second
	// minKickGap spaces the extra checks that failed writes ask for, so a
	// burst of ENOSPC failures costs one statfs per data directory per gap.
	minKickGap = 10 * time.Millisecond
)

// diskWatch is the broker's set of data disks.
type diskWatch struct {
	maxBits atomic.Uint64 // disk_max_used_ratio, math.Float64bits (Reload changes it)
	every   time.Duration // diskCheckInterval; tests set it longer
	logf    func(format string, args ...any)
	// kick asks the watcher for a check now (ENOSPC, retention).
	kick chan struct{}
	// rejects counts puts and mputs refused because their disk was full.
	rejects atomic.Int64

	mu    sync.Mutex
	disks map[string]*dataDisk // by cleaned directory
}

// dataDisk is one data directory and the last measure of its file system.
type dataDisk struct {
	dir  string // as configured, cleaned
	full atomic.Bool
	last atomic.Pointer[diskUsage]
}

// diskUsage is one statfs of a data directory.
type diskUsage struct {
	space  float64 // used / (used + available) blocks, as df's Use%
	inodes float64 // used / total inodes; 0 where the file system has no count
	err    error   // statfs failed: the disk is not marked full for it
	// usedBytes and freeBytes are as df counts them: used blocks, and
	// blocks available to unprivileged users.
	usedBytes, freeBytes uint64
}

func newDiskWatch(max float64, logf func(string, ...any)) *diskWatch {
	w := &diskWatch{every: diskCheckInterval, logf: logf, kick: make(chan struct{}, 1), disks: map[string]*dataDisk{}}
	w.setMax(max)
	return w
}

// maxRatio is disk_max_used_ratio; setMax changes it (Reload) and wakes the
// watcher to judge every disk again.
func (w *diskWatch) maxRatio() float64 { return math.Float64frombits(w.maxBits.Load()) }

func (w *diskWatch) setMax(r float64) { w.maxBits.Store(math.Float64bits(r)) }

// disk returns the dataDisk of directory dir, adding it (and measuring it
// once) if it is new.
func (w *diskWatch) disk(dir string) *dataDisk {
	dir = filepath.Clean(dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disks[dir]
	if d == nil {
		d = &dataDisk{dir: dir}
		w.disks[dir] = d
		w.measure(d)
	}
	return d
}

// list returns the disks sorted by directory.
func (w *diskWatch) list() []*dataDisk {
	w.mu.Lock()
	out := make([]*dataDisk, 0, len(w.disks))
	for _, d := range w.disks {
		out = append(out, d)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out
}

// checkAll measures every disk.
func (w *diskWatch) checkAll() {
	for _, d := range w.list() {
		w.measure(d)
	}
}

// wake asks for a check soon, without blocking.
func (w *diskWatch) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// wakeOn asks for a check when err says the disk (or a quota) is full.
func (w *diskWatch) wakeOn(err error) {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		w.wake()
	}
}

// run measures every disk every w.every and when woken, until done is
// closed.
func (w *diskWatch) run(done <-chan struct{}) {
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
func (w *diskWatch) measure(d *dataDisk) {
	u := statDisk(d.dir)
	prev := d.last.Swap(u)
	full := u.err == nil && (u.space > w.maxRatio() || u.inodes > w.maxRatio())
	was := d.full.Swap(full)
	switch {
	case full && !was:
		w.logf("%s; refusing puts to its topics", w.fullMessage(d, u))
	case !full && was:
		w.logf("data_dir %s is %s used again, inodes %s: at most disk_max_used_ratio %s; accepting puts",
			showDir(d.dir), percent(u.space), percent(u.inodes), ratio(w.maxRatio()))
	}
	if u.err != nil && (prev == nil || prev.err == nil || prev.err.Error() != u.err.Error()) {
		w.logf("disk watermark: %v (puts to its topics are not refused for it)", u.err)
	}
}

// statDisk measures the file system of dir.
func statDisk(dir string) *diskUsage {
	var st unix.Statfs_t
	p := dir
	for {
		err := unix.Statfs(p, &st)
		if err == nil {
			break
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) || parent == p {
			return &diskUsage{err: fmt.Errorf("statfs %s: %w", showDir(p), err)}
		}
		p = parent
	}
	u := &diskUsage{}
	// As df: blocks reserved for root count as neither used nor available.
	if used, avail := st.Blocks-st.Bfree, st.Bavail; used+avail > 0 {
		u.space = float64(used) / float64(used+avail)
	}
	u.usedBytes, u.freeBytes = (st.Blocks-st.Bfree)*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
	if st.Files > 0 && st.Ffree <= st.Files {
		u.inodes = float64(st.Files-st.Ffree) / float64(st.Files)
	}
	return u
}

// fullMessage is the error a put to a full disk gets, without the advice.
func (w *diskWatch) fullMessage(d *dataDisk, u *diskUsage) string {
	if u == nil {
		u = &diskUsage{}
	}
	if u.space <= w.maxRatio() && u.inodes > w.maxRatio() {
		return "disk full: data_dir " + showDir(d.dir) + " has " + percent(u.inodes) +
			" of its inodes used, over disk_max_used_ratio " + ratio(w.maxRatio())
	}
	return "disk full: data_dir " + showDir(d.dir) + " is " + percent(u.space) +
		" used, over disk_max_used_ratio " + ratio(w.maxRatio())
}

// refusal is the reply to a put to the full disk d.
func (w *diskWatch) refusal(d *dataDisk) string {
	return w.fullMessage(d, d.last.Load()) + "; puts resume when space is freed"
}

// maxUsed is the highest space ratio of the disks measured without error.
func (w *diskWatch) maxUsed() float64 {
	var m float64
	for _, d := range w.list() {
		if u := d.last.Load(); u != nil && u.err == nil {
			m = max(m, u.space)
		}
	}
	return m
}

// writeStats answers `stats disks`: one line per data directory.
func (w *diskWatch) writeStats(sb *strings.Builder) {
	sb.WriteString("STATS\r\n")
	for _, d := range w.list() {
		u := d.last.Load()
		if u == nil {
			continue
		}
		if u.err != nil {
			fmt.Fprintf(sb, "%s error %s\r\n", showDir(d.dir), oneLine(u.err.Error()))
			continue
		}
		fmt.Fprintf(sb, "%s used_ratio %.4f inodes_used_ratio %.4f full %t\r\n", showDir(d.dir), u.space, u.inodes, d.full.Load())
	}
	sb.WriteString("END\r\n")
}

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
