package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const benchDurableHelp = `
Durable produce at any partition count, each figure next to a baseline
measured in the same run:

  1 raw append, 1 KiB records, fdatasync every 256, in --data-dir
  6 durable produce: 1 KiB group-commit puts, 4 connections x 64 in flight,
    round robin over 1, 64, 512 and 1000 partitions of a group-commit topic
    -> records/s as a ratio of (1); target every point >= 0.8x, and 512
    partitions >= 140k/s (8x the 17.5k/s of per-partition group commit)
  7 synchronous durable put p50 (100 B) at 1 and 512 partitions, next to one
    raw write + fdatasync of 100 B (p50) -> target <= 260us; with the
    broker's CPU per put (user + system, /proc/<pid>/stat)
  8 restart after kill -9 with 1000 partitions holding --restart-mb MB
    (and --restart-mb-large MB if given), next to the restart of the same
    1000 partitions empty -> target <= 2 s, equal within noise; an info
    row after each point says what its journal recovery replayed (it
    depends on where the kill fell between two checkpoints)

After each point of 6 an info row runs the same load on a topic of the
same partitions in threshold mode (ack after write(), never fsynced): the
broker's own request path with no fsync, the most any durable design of
this broker can deliver on the machine. It gives the broker's CPU per put
(user + system, from /proc; Linux only) for both runs, and the durable
rate as a ratio of it. --ceiling=false skips these runs. Row 6 starts
after --warmup untimed puts, so that the journal recycles its files as a
long-running broker's does instead of zero-filling new ones.

After the table, TAIL gives for each point of 6 and figure of 7 the
client's put latency (p50, p99, p99.9, p99.99, max) and p99.9/p50 against
the tail bound, the larger of 8 x p50 and 1.5 x the raw fdatasync p99.9 +
p50 (raw: a run at the broker's bytes per journal fdatasync after each
point of 6 unless --tail-raw=false, else row 1's; the 100 B raw baseline
for 7), and the broker's journal, checkpoint and segment fsyncs and put
durations over that row only, from its /metrics before and after
(bucket-resolution estimates). --json: the rows' "tail" field.

It starts its own brokers (--server, else bin/metaq-server, else
metaq-server next to this executable) on generated configurations in
--data-dir: one with topics durable-<n> (n partitions, group commit) for 6
and 7, one with the 1000-partition topic restart for 8. Both are removed at
the end unless --keep. Targets are reported, never asserted. bench all runs
the same rows after its own, reusing its raw baseline.
`

// durableOpts configures the durable-produce benchmarks.
type durableOpts struct {
	bin          string
	dir          string
	dur          time.Duration
	partitions   []int
	syncN        int
	restartParts int
	restartMB    int64
	restartMBBig int64
	keep         bool
	ceiling      bool
	warmup       int64
	tailRaw      bool
}

func benchDurableCmd(e *env) *cobra.Command {
	return leaf(e, "bench durable", "bench durable [--data-dir DIR] [--server BIN] [--seconds S] [--partitions 1,64,512,1000] [--restart-mb 1000] [--restart-mb-large MB] [--json]", benchDurableHelp, func(fs *pflag.FlagSet) func(args []string) error {
		dataDir := fs.String("data-dir", "", "directory for the raw baseline and the brokers' data (default: a new temporary directory)")
		server := fs.String("server", "", "metaq-server binary to start")
		secs := fs.Float64("seconds", 3, "duration of each throughput run")
		keep := fs.Bool("keep", false, "keep the brokers' data")
		asJSON := fs.Bool("json", false, "print JSON")
		opts := durableFlags(fs)
		return func(args []string) error {
			o, err := opts()
			if err != nil {
				return err
			}
			if *secs <= 0 {
				return usagef("--seconds must be positive")
			}
			o.dur = time.Duration(*secs * float64(time.Second))
			o.keep = *keep
			if o.bin = findServer(*server); o.bin == "" {
				return errors.New("no metaq-server binary found (build bin/ or pass --server)")
			}
			dir, cleanup, err := benchDir(*dataDir)
			if err != nil {
				return err
			}
			defer cleanup()
			o.dir = dir
			fmt.Fprintf(e.stderr, "metaq bench durable: data dir %s, %s per throughput run\n", dir, o.dur)
			fmt.Fprintf(e.stderr, "  running raw append...\n")
			raw, err := runRawBench(e.ctx, dir, 1024, 256, o.dur)
			rawRow := benchRow{Name: "1 raw append 1 KiB, fdatasync/256", Value: raw.RecsPerS,
				Result: fmt.Sprintf("%.1f MB/s (%s rec/s)", raw.MBPerS, fmtRate(raw.RecsPerS))}
			if err != nil {
				rawRow = benchRow{Name: rawRow.Name, Result: "error", Error: err.Error()}
			}
			rows := append([]benchRow{rawRow}, runDurableBench(e, o, raw)...)
			if *asJSON {
				return writeJSON(e.stdout, map[string]any{"data_dir": dir, "seconds": *secs, "results": rows})
			}
			return printRows(e, rows)
		}
	})
}

// durableFlags declares the flags bench durable and bench all share and
// returns a function that checks them after parsing.
func durableFlags(fs *pflag.FlagSet) func() (durableOpts, error) {
	parts := fs.String("partitions", "1,64,512,1000", "partition counts of the durable-produce matrix (comma-separated, each 1..1024)")
	syncN := fs.Int("sync-n", 2000, "synchronous puts per latency figure")
	rparts := fs.Int("restart-partitions", 1000, "partitions of the restart benchmark")
	rmb := fs.Int64("restart-mb", 1000, "data in the restart benchmark's partitions, in MB of 10^6 bytes (0 skips it)")
	rbig := fs.Int64("restart-mb-large", 0, "a second, larger restart point in MB (for example 10000; 0 = none)")
	warmup := fs.Int64("warmup", 300000, "untimed 1 KiB puts before row 6, so that the journal recycles its files as a long-running broker's does (more than its first file and two spares of 64 MiB; 0 = none)")
	ceiling := fs.Bool("ceiling", true, "after each durable-produce point, run the same load with no fsync (threshold mode) as its ceiling")
	tailRaw := fs.Bool("tail-raw", true, "after each durable-produce point, a raw append run of the same length at the bytes per fdatasync of the broker's journal rounds in it, whose fdatasync p99.9 sets the tail bound (false: row 1's)")
	return func() (durableOpts, error) {
		o := durableOpts{syncN: *syncN, restartParts: *rparts, restartMB: *rmb, restartMBBig: *rbig, ceiling: *ceiling, warmup: *warmup, tailRaw: *tailRaw}
		for _, f := range strings.Split(*parts, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 1024 {
				return o, usagef("--partitions: %q is not a partition count 1..1024", f)
			}
			o.partitions = append(o.partitions, n)
		}
		if o.warmup < 0 {
			return o, usagef("--warmup must be >= 0")
		}
		if o.syncN < 1 || o.restartParts < 1 || o.restartParts > 1024 || o.restartMB < 0 || o.restartMBBig < 0 {
			return o, usagef("--sync-n must be positive, --restart-partitions 1..1024, --restart-mb and --restart-mb-large >= 0")
		}
		if o.restartMBBig > 0 && o.restartMBBig <= o.restartMB {
			return o, usagef("--restart-mb-large must be larger than --restart-mb")
		}
		return o, nil
	}
}

// printRows prints benchmark rows as the table bench all prints.
func printRows(e *env, rows []benchRow) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tRESULT\tBASELINE\tRATIO\tTARGET\tMET")
	for _, r := range rows {
		m := ""
		if r.Met != nil {
			m = map[bool]string{true: "yes", false: "no"}[*r.Met]
		}
		res := r.Result
		if r.Error != "" {
			res = "error: " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, res, dash(r.Baseline), dash(r.Ratio), dash(r.Target), dash(m))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printTails(e.stdout, rows)
	return nil
}

// durableConfig is a broker configuration with one group-commit topic per
// entry of topics (name -> partitions), and for each nofsync entry
// (name -> partitions) a threshold-mode topic that never reaches its
// threshold: acknowledged after write(), fsynced only when it closes.
func durableConfig(path string, topics, nofsync [][2]string) error {
	var b strings.Builder
	b.WriteString("# generated by metaq bench durable\nhost = \"127.0.0.1\"\nunflush_threshold = 0\nauto_create_topics = false\n")
	for _, t := range topics {
		fmt.Fprintf(&b, "\n[[topic]]\nname = %q\nnum_partitions = %s\n", t[0], t[1])
	}
	for _, t := range nofsync {
		fmt.Fprintf(&b, "\n[[topic]]\nname = %q\nnum_partitions = %s\nunflush_threshold = %d\nunflush_interval = 0\n", t[0], t[1], nofsyncThreshold)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// nofsyncThreshold is the unflush_threshold of the ceiling topics: more
// messages than a benchmark run sends, so none of them is fsynced.
const nofsyncThreshold = 1 << 40

// procCPU is the user + system CPU time the process has used so far, from
// /proc/<pid>/stat (ok false where there is none).
func procCPU(pid int) (time.Duration, bool) {
	u, s, ok := procCPUSplit(pid)
	return u + s, ok
}

// measuredProduce runs a produce benchmark against srv and returns it with
// the broker's CPU per message over the run (0 when unknown).
func measuredProduce(e *env, srv *childServer, c prodConfig) (prodResult, time.Duration, error) {
	pid := srv.cmd.Process.Pid
	c0, ok0 := procCPU(pid)
	r, err := runProduceBench(e.ctx, c)
	c1, ok1 := procCPU(pid)
	var per time.Duration
	if ok0 && ok1 && err == nil && r.Msgs > 0 {
		per = (c1 - c0) / time.Duration(r.Msgs)
	}
	return r, per, err
}

// fmtCPU prints a broker CPU time per put, or "?".
func fmtCPU(d time.Duration) string {
	if d <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.2fµs", float64(d)/1e3)
}

// runDurableBench runs rows 6 to 8 against brokers it starts, with raw as
// the baseline of (6).
func runDurableBench(e *env, o durableOpts, raw rawResult) []benchRow {
	var rows []benchRow
	met := func(ok bool) *bool { return &ok }
	progress := func(s string) { fmt.Fprintf(e.stderr, "  running %s...\n", s) }
	fail := func(name string, err error) benchRow {
		return benchRow{Name: name, Result: "error", Error: err.Error()}
	}

	var topics, nofsync [][2]string
	for _, n := range o.partitions {
		topics = append(topics, [2]string{"durable-" + strconv.Itoa(n), strconv.Itoa(n)})
		if o.ceiling {
			nofsync = append(nofsync, [2]string{"nofsync-" + strconv.Itoa(n), strconv.Itoa(n)})
		}
	}
	if !contains(o.partitions, 512) {
		topics = append(topics, [2]string{"durable-512", "512"}) // for the sync figure
	}
	if !contains(o.partitions, 1) {
		topics = append(topics, [2]string{"durable-1", "1"})
	}
	cfgPath := filepath.Join(o.dir, "durable.toml")
	if err := durableConfig(cfgPath, topics, nofsync); err != nil {
		return []benchRow{fail("6 durable produce", err)}
	}
	// The HTTP listener serves /metrics, scraped around each row for the
	// broker's side of the tail figures.
	httpPort, err := freePort()
	if err != nil {
		return []benchRow{fail("6 durable produce", err)}
	}
	srv, err := startServer(e.ctx, o.bin, cfgPath, filepath.Join(o.dir, "durable"), e.stderr, "--http-port", strconv.Itoa(httpPort))
	if err != nil {
		return []benchRow{fail("6 durable produce", err)}
	}
	defer srv.stop(o.keep)
	srv.httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort)
	// scrape reads the broker's /metrics (ok false: no broker figures).
	scrape := func() (metricsScrape, bool) { return scrapeMetrics(e.ctx, srv.httpAddr, e.timeout) }
	brokerSide := func(a metricsScrape, aok bool) *brokerTail {
		b, bok := scrape()
		if !aok || !bok {
			return nil
		}
		return brokerDelta(a, b)
	}

	// load is row 6's load over durable-<n>: 1 KiB puts, 4 x 64 in flight.
	load := func(n int) prodConfig {
		return prodConfig{addr: srv.addr, topic: "durable-" + strconv.Itoa(n), size: 1024, producers: 4, batch: 1,
			inflight: 64, duration: o.dur, partition: -1, partitions: n}
	}

	// Warm-up, not timed: a fresh broker zero-fills new journal files
	// until its first checkpoints free files to recycle; a long-running
	// broker does not, so neither do the timed runs.
	if o.warmup > 0 {
		progress(fmt.Sprintf("warm-up of %d puts", o.warmup))
		warm := load(1)
		warm.duration, warm.messages = 0, o.warmup
		if _, err := runProduceBench(e.ctx, warm); err != nil {
			return []benchRow{fail("6 durable produce (warm-up)", err)}
		}
	}

	// 6. Durable produce at each partition count.
	for _, n := range o.partitions {
		name := fmt.Sprintf("6 durable 1 KiB put, 4x64 in flight, %s", partitionsN(n))
		target := ">= 0.8x of (1)"
		if n == 512 {
			target = ">= 0.8x of (1), >= 140k/s"
		}
		progress("durable produce over " + partitionsN(n))
		pc := load(n)
		before, bok := scrape()
		r, cpu, err := measuredProduce(e, srv, pc)
		broker := brokerSide(before, bok)
		row := produceRow(benchRow{Name: name, Target: target}, r, err)
		if err == nil && r.Errors == 0 {
			row.Result = fmt.Sprintf("%s rec/s (%.1f MB/s, p50 %s, p99 %s)", fmtRate(r.MsgsPerS), r.MBPerS, fmtDur(r.P50), fmtDur(r.P99))
			if raw.RecsPerS > 0 {
				ratio := r.MsgsPerS / raw.RecsPerS
				row.Baseline = fmt.Sprintf("%s rec/s (1)", fmtRate(raw.RecsPerS))
				row.Ratio = fmt.Sprintf("%.2fx", ratio)
				ok := ratio >= 0.8
				if n == 512 {
					ok = ok && r.MsgsPerS >= 140e3
				}
				row.Met = met(ok)
			}
			row.Tail = rowTail(e, o, r.Lat, raw, broker)
		}
		rows = append(rows, row)
		if o.ceiling && err == nil && r.Errors == 0 {
			rows = append(rows, ceilingRow(e, srv, pc, n, r, cpu))
		}
	}

	// 7. Synchronous durable put latency, next to one raw write+fdatasync.
	progress("synchronous durable put")
	writeBack()
	oneSync, rawErr := rawSyncLat(e.ctx, o.dir, 100, o.syncN)
	oneLat := oneSync.P50
	for _, n := range []int{1, 512} {
		name := fmt.Sprintf("7 sync durable put p50 (100 B), %s", partitionsN(n))
		before, bok := scrape()
		// The broker's CPU per put tells a put that does more work from
		// one that waits longer (a slower fdatasync, a busy machine).
		r, cpu, err := measuredProduce(e, srv, prodConfig{addr: srv.addr, topic: "durable-" + strconv.Itoa(n), size: 100, producers: 1, batch: 1,
			sync: true, messages: int64(o.syncN), partition: -1, partitions: n})
		broker := brokerSide(before, bok)
		row := produceRow(benchRow{Name: name, Target: "<= 260µs"}, r, err)
		if err == nil && r.Errors == 0 {
			row.Value = float64(r.P50)
			row.Result = fmt.Sprintf("p50 %s (p99 %s), broker CPU/put %s", fmtDur(r.P50), fmtDur(r.P99), fmtCPU(cpu))
			row.Met = met(r.P50 <= 260*time.Microsecond)
			if rawErr == nil && oneLat > 0 {
				row.Baseline = fmt.Sprintf("raw write+fdatasync p50 %s", fmtDur(oneLat))
				row.Ratio = fmt.Sprintf("%.2fx", float64(r.P50)/float64(oneLat))
				row.Tail = newTail(r.Lat, oneSync, fmt.Sprintf("raw write+fdatasync of 100 B, %d in this run", oneSync.N), broker)
			}
		}
		rows = append(rows, row)
	}

	// 8. Restart time after kill -9.
	if o.restartMB > 0 {
		rows = append(rows, runRestartBench(e, o)...)
	}
	return rows
}

// ceilingRow runs durable's load again on nofsync-<n> (no fsync) and
// reports it with the broker's CPU per put in both runs and the durable
// rate as a ratio of it.
func ceilingRow(e *env, srv *childServer, pc prodConfig, n int, durable prodResult, durableCPU time.Duration) benchRow {
	fmt.Fprintf(e.stderr, "  running the same load with no fsync over %s...\n", partitionsN(n))
	name := "  info: same load, ack after write(), no fsync"
	pc.topic = "nofsync-" + strconv.Itoa(n)
	r, cpu, err := measuredProduce(e, srv, pc)
	// What this run left dirty in the page cache is never fsynced by the
	// broker; written back now, it does not slow the next durable run's
	// checkpoints (a syncfs writes every dirty page of the file system).
	writeBack()
	row := produceRow(benchRow{Name: name}, r, err)
	if err == nil && r.Errors == 0 {
		row.Result = fmt.Sprintf("%s rec/s; broker CPU/put %s (durable %s)", fmtRate(r.MsgsPerS), fmtCPU(cpu), fmtCPU(durableCPU))
		if r.MsgsPerS > 0 {
			row.Ratio = fmt.Sprintf("%.2fx", durable.MsgsPerS/r.MsgsPerS)
			row.Baseline = "durable / this"
		}
	}
	return row
}

// partitionsN is "1 partition" or "n partitions".
func partitionsN(n int) string {
	if n == 1 {
		return "1 partition"
	}
	return strconv.Itoa(n) + " partitions"
}

// rawSyncLat is the latency of n appends of one size-byte record to a new
// file in dir, each one write() and one fdatasync: one durable put's disk
// cost.
func rawSyncLat(ctx context.Context, dir string, size, n int) (latSummary, error) {
	f, err := os.CreateTemp(dir, "metaq-raw-*.dat")
	if err != nil {
		return latSummary{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rec := bytes.Repeat([]byte{'r'}, size)
	lat := newLatRec(n)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if _, err := f.Write(rec); err != nil {
			return latSummary{}, err
		}
		if err := fsutil.Fdatasync(f); err != nil {
			return latSummary{}, err
		}
		lat.add(int64(time.Since(t0)))
	}
	return latStats(lat), ctx.Err()
}

// rowTail is the tail figures of a row 6 point: client latencies c, with
// the raw fdatasync p99.9 of a raw run at the broker's bytes per journal
// fdatasync in that point (--tail-raw), else of row 1's raw run.
func rowTail(e *env, o durableOpts, c latSummary, raw rawResult, broker *brokerTail) *tailStats {
	sync, from := raw.Sync, fmt.Sprintf("row 1: %d B per fdatasync", raw.Size*raw.Batch)
	if o.tailRaw && broker != nil && broker.BytesPerFsync >= 1 {
		size := int(math.Round(broker.BytesPerFsync))
		fmt.Fprintf(e.stderr, "  running raw append at %d B per fdatasync...\n", size)
		if r, err := runRawBench(e.ctx, o.dir, size, 1, o.dur); err == nil && r.Sync.N > 0 {
			sync, from = r.Sync, fmt.Sprintf("raw run of %d B per fdatasync, as the broker's rounds", size)
		}
	}
	return newTail(c, sync, from, broker)
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// runRestartBench measures the restart of a broker with o.restartParts
// partitions after kill -9: empty (the baseline), then holding
// o.restartMB MB, then o.restartMBBig MB if set. It adds an info row with
// the broker's RSS and goroutines with those partitions open.
func runRestartBench(e *env, o durableOpts) []benchRow {
	const topic = "restart"
	name := func(mb int64) string {
		return fmt.Sprintf("8 restart after kill -9, %d partitions, %s", o.restartParts, fmtMB(mb))
	}
	fail := func(err error) []benchRow {
		return []benchRow{{Name: name(o.restartMB), Result: "error", Error: err.Error()}}
	}
	cfgPath := filepath.Join(o.dir, "restart.toml")
	if err := durableConfig(cfgPath, [][2]string{{topic, strconv.Itoa(o.restartParts)}}, nil); err != nil {
		return fail(err)
	}
	data := filepath.Join(o.dir, "restart")
	defer func() {
		if !o.keep {
			os.RemoveAll(data)
		}
	}()
	fmt.Fprintf(e.stderr, "  running restart with %d empty partitions...\n", o.restartParts)
	srv, err := startServer(e.ctx, o.bin, cfgPath, data, e.stderr)
	if err != nil {
		return fail(err)
	}
	srv.kill()
	srv, empty, err := restartTimed(e, o.bin, cfgPath, data)
	if err != nil {
		return fail(err)
	}
	var rows []benchRow
	var filled int64 // MB so far
	var prev time.Duration
	for _, mb := range []int64{o.restartMB, o.restartMBBig} {
		if mb == 0 {
			continue
		}
		fmt.Fprintf(e.stderr, "  filling %d partitions to %s...\n", o.restartParts, fmtMB(mb))
		t0 := time.Now()
		r, err := runProduceBench(e.ctx, prodConfig{addr: srv.addr, topic: topic, size: 1024, producers: 4, batch: 128,
			inflight: 8, messages: (mb - filled) * 1e6 / 1024, partition: -1, partitions: o.restartParts})
		if err == nil && r.Errors > 0 {
			err = fmt.Errorf("%d messages failed: %s", r.Errors, r.FirstErr)
		}
		if err != nil {
			srv.stop(true)
			return append(rows, benchRow{Name: name(mb), Result: "error", Error: "filling: " + err.Error()})
		}
		filled = mb
		fmt.Fprintf(e.stderr, "  filled in %s (%.0f MB/s); kill -9 and restart...\n", fmtDur(time.Since(t0)), r.MBPerS)
		srv.kill()
		var d time.Duration
		if srv, d, err = restartTimed(e, o.bin, cfgPath, data); err != nil {
			return append(rows, benchRow{Name: name(mb), Result: "error", Error: err.Error()})
		}
		row := benchRow{Name: name(mb), Value: d.Seconds(), Result: fmt.Sprintf("%s to ready", fmtDur(d)),
			Baseline: fmt.Sprintf("%s empty (same run)", fmtDur(empty)), Ratio: fmt.Sprintf("%.2fx", d.Seconds()/empty.Seconds()),
			Target: "<= 2s, equal within noise"}
		if prev > 0 {
			row.Baseline = fmt.Sprintf("%s at %s (same run)", fmtDur(prev), fmtMB(o.restartMB))
			row.Ratio = fmt.Sprintf("%.2fx", d.Seconds()/prev.Seconds())
		}
		ok := d <= 2*time.Second
		row.Met = &ok
		rows = append(rows, row)
		// The replay depends on where the kill fell between two
		// checkpoints, not on the binary: say how much there was, so
		// that two runs' restarts can be compared.
		replay := srv.replay
		if replay == "" {
			replay = "nothing to replay"
		}
		rows = append(rows, benchRow{Name: "  info: its journal recovery", Result: replay})
		prev = d
	}
	rss, threads := brokerMemory(e, srv)
	rows = append(rows, benchRow{Name: fmt.Sprintf("  info: broker with %d partitions, idle after restart", o.restartParts),
		Value: float64(rss), Result: fmt.Sprintf("RSS %s, %s goroutines", fmtMB(rss/1e6), threads)})
	srv.stop(true)
	return rows
}

// restartTimed starts the broker on data and returns it and the time from
// the start to its ready line.
func restartTimed(e *env, bin, config, data string) (*childServer, time.Duration, error) {
	t0 := time.Now()
	srv, err := startServer(e.ctx, bin, config, data, e.stderr)
	return srv, time.Since(t0), err
}

// kill SIGKILLs the broker and waits for it to exit.
func (s *childServer) kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	<-s.logDone
}

// brokerMemory returns the broker's VmRSS in bytes (0 when /proc has no
// such field) and its goroutine count from stats ("?" on error).
func brokerMemory(e *env, s *childServer) (rss int64, threads string) {
	threads = "?"
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb * 1024
			}
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	rc, err := dialRaw(ctx, nil, s.addr)
	if err != nil {
		return rss, threads
	}
	defer rc.Close()
	code, body, err := rc.roundTrip(func(dst []byte, op int32) []byte { return protocol.AppendStats(dst, "", op) })
	if err != nil || code != protocol.StatusOK {
		return rss, threads
	}
	for _, l := range bytes.Split(body, []byte("\r\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("threads ")); ok {
			threads = string(v)
		}
	}
	return rss, threads
}

// fmtMB prints a size given in MB.
func fmtMB(mb int64) string {
	if mb >= 1000 && mb%1000 == 0 || mb >= 10000 {
		return strconv.FormatFloat(float64(mb)/1000, 'f', -1, 64) + " GB"
	}
	return strconv.FormatInt(mb, 10) + " MB"
}
