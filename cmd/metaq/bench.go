package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const benchHelp = `
Benchmarks. Speed is reported, never asserted: the exit status is non-zero
only when a benchmark could not run or requests failed.

  bench produce  pipelined producers on raw connections: msgs/s, MB/s,
                 per-request latency p50/p99/p99.9, errors
  bench consume  one consumer reading N records from the page cache
  bench rtt      bare loopback TCP round trip and the broker's version RTT
  bench raw      raw-disk baseline: append + fdatasync every --batch records
  bench durable  durable produce at 1..1000 partitions vs raw append +
                 fdatasync, synchronous durable put, restart after kill -9
  bench all      the whole matrix with same-run baselines and ratios
                 (may start its own broker; see docs/benchmarks.md)

`

func cmdBench(e *env) *cobra.Command {
	return parent(e, "bench", benchHelp, benchProduceCmd(e), benchConsumeCmd(e), benchRTTCmd(e), benchRawCmd(e),
		benchDurableCmd(e), benchAllCmd(e))
}

// topicPartitions asks the broker for a topic's partition count.
func topicPartitions(e *env, topic string) (int, error) {
	adm, err := newAdmin(e)
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	infos, err := adm.Topics(ctx)
	if err != nil {
		return 0, err
	}
	i := slices.IndexFunc(infos, func(t admin.Topic) bool { return t.Name == topic })
	if i < 0 {
		return 0, fmt.Errorf("unknown topic %q (not listed by the broker at %s)", topic, e.addr)
	}
	return infos[i].Partitions, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fmtDur prints a latency with 3 significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

const benchProduceHelp = `
Pipelined producers, each on its own connection: with --batch 1 every
request is one put, with --batch B > 1 an mput of B messages. --sync waits
for each reply before sending the next request (a synchronous put);
otherwise up to --inflight requests per producer are in flight. Latency is
per request, from the write to the reply. --partition -1 spreads requests
over all partitions round robin. Give --messages or --duration.

Messages are sent as the SDK's idempotent producer sends them (the
default): each carries a producer id (one per producer and partition) and
its sequence, so each request is built and checksummed as it is sent;
--idempotence=false sends the plain pre-encoded messages. --ab R runs R
rounds, each one run with --idempotence=false and one with it on, taking
turns going first (both building and checksumming each request as it is sent, as the SDK does), and
prints the ratio on/off of the medians of msgs/s and of the broker's CPU
per message (utime+stime from /proc/<pid>/stat, pid from stats: a broker on
this host; "?" otherwise). Under each run a line tells where its cost went:
the broker's user and system CPU and context switches per message (from
/proc), this client's own CPU per message (it shares the machine), and from
the broker's /metrics (when it has an HTTP listener) messages per journal
round, fsyncs per round, journal bytes per message, key index bytes added
(a chunk sealed in the run when large), GC cycles and heap allocated per
message; the medians of each arm and their ratios follow the summary.
`

func benchProduceCmd(e *env) *cobra.Command {
	return leaf(e, "bench produce", "bench produce [--topic T] [--size B] [--producers N] [--messages N | --duration D] [--batch B] [--sync] [--inflight K] [--partition P] [--idempotence=false] [--ab R]", benchProduceHelp, func(fs *pflag.FlagSet) func(args []string) error {
		cfg := prodConfig{}
		fs.StringVar(&cfg.topic, "topic", "meta-test", "topic")
		fs.IntVar(&cfg.size, "size", 1024, "message size in bytes")
		fs.IntVar(&cfg.producers, "producers", 4, "producers (one connection each)")
		fs.Int64Var(&cfg.messages, "messages", 0, "messages to send in total")
		fs.DurationVar(&cfg.duration, "duration", 0, "run for this long instead of --messages (default 5s when neither is given)")
		fs.IntVar(&cfg.batch, "batch", 1, "messages per request: 1 = put, >1 = mput")
		fs.BoolVar(&cfg.sync, "sync", false, "wait for each reply before the next request")
		fs.IntVar(&cfg.inflight, "inflight", 256, "requests in flight per producer")
		fs.IntVar(&cfg.partition, "partition", -1, "partition, or -1 to spread over all")
		fs.BoolVar(&cfg.idem, "idempotence", true, "send as the idempotent producer: a producer id and a sequence per message")
		ab := fs.Int("ab", 0, "rounds alternating --idempotence=false and true; prints the ratio on/off")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if *ab < 0 {
				return usagef("--ab must be >= 0")
			}
			if cfg.size < 0 || cfg.producers < 1 || cfg.batch < 1 || cfg.inflight < 1 || cfg.messages < 0 {
				return usagef("--size, --producers, --batch, --inflight and --messages must be positive")
			}
			if cfg.messages == 0 && cfg.duration == 0 {
				cfg.duration = 5 * time.Second
			}
			n, err := topicPartitions(e, cfg.topic)
			if err != nil {
				return err
			}
			if cfg.partition >= n {
				return usagef("--partition %d out of range: %s has %d partitions", cfg.partition, cfg.topic, n)
			}
			cfg.addr, cfg.sec, cfg.partitions = e.addr, e.sec, n
			if *ab > 0 {
				return runIdemAB(e, cfg, *ab)
			}
			cfg.prog = newProgress(e, "bench produce")
			res, err := runProduceBench(e.ctx, cfg)
			if *asJSON {
				writeJSON(e.stdout, struct {
					Config map[string]any `json:"config"`
					prodResult
				}{prodConfigMap(cfg), res})
			} else {
				printProduce(e.stdout, cfg, res)
			}
			if err != nil {
				return err
			}
			if res.Errors > 0 {
				return fmt.Errorf("%d messages failed, first: %s", res.Errors, res.FirstErr)
			}
			return nil
		}
	})
}

func prodConfigMap(cfg prodConfig) map[string]any {
	return map[string]any{"topic": cfg.topic, "size": cfg.size, "producers": cfg.producers, "batch": cfg.batch,
		"inflight": cfg.inflight, "sync": cfg.sync, "partition": cfg.partition, "idempotence": cfg.idem}
}

// runIdemAB runs rounds of the produce benchmark alternating idempotence
// off and on, and prints each run and the ratios on/off of the medians.
func runIdemAB(e *env, cfg prodConfig, rounds int) error {
	pid := brokerPID(e)
	probe := newArmProbe(e, pid)
	rate := map[bool][]float64{}
	cpu := map[bool][]float64{}
	costs := map[bool][]armCost{}
	for r := range rounds {
		// The arms take turns going first: the second of a pair runs
		// after the first one's writes (dirty pages under writeback), and
		// a fixed order gave that cost to one arm every round.
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, on := range order {
			c := cfg
			c.idem, c.build = on, true
			s0 := probe.sample(e.ctx)
			c0, ok0 := procCPU(pid)
			res, err := runProduceBench(e.ctx, c)
			c1, ok1 := procCPU(pid)
			s1 := probe.sample(e.ctx)
			if err != nil {
				return err
			}
			if res.Errors > 0 {
				return fmt.Errorf("%d messages failed, first: %s", res.Errors, res.FirstErr)
			}
			per := time.Duration(0)
			if pid > 0 && ok0 && ok1 && res.Msgs > 0 {
				per = (c1 - c0) / time.Duration(res.Msgs)
				cpu[on] = append(cpu[on], float64(c1-c0)/float64(res.Msgs))
			}
			rate[on] = append(rate[on], res.MsgsPerS)
			fmt.Fprintf(e.stdout, "round %d idempotence=%t msgs/s=%.0f p50=%s p99=%s broker CPU/msg=%s\n",
				r+1, on, res.MsgsPerS, fmtDur(res.P50), fmtDur(res.P99), fmtCPU(per))
			ac := armCostOf(s0, s1, res.Msgs)
			costs[on] = append(costs[on], ac)
			fmt.Fprintf(e.stdout, "  %s\n", ac)
		}
	}
	ratio := func(m map[bool][]float64) string {
		if len(m[false]) == 0 || len(m[true]) == 0 {
			return "?"
		}
		off, on := median(m[false]), median(m[true])
		if off <= 0 || on <= 0 { // no CPU measured (a clock tick is 10 ms)
			return "?"
		}
		return fmt.Sprintf("%.3fx", on/off)
	}
	fmt.Fprintf(e.stdout, "idempotence on/off (medians of %d rounds): msgs/s %s, broker CPU per message %s\n",
		rounds, ratio(rate), ratio(cpu))
	printArmMedians(e.stdout, costs)
	return nil
}

// brokerPID is the pid the broker's stats report when that process is on
// this host (its /proc entry exists), else 0.
func brokerPID(e *env) int {
	adm, err := newAdmin(e)
	if err != nil {
		return 0
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	st, err := adm.Stats(ctx, e.addr, "")
	if err != nil {
		return 0
	}
	pid, err := st.Int("pid")
	if err != nil {
		return 0
	}
	if _, ok := procCPU(int(pid)); !ok {
		return 0
	}
	return int(pid)
}

func printProduce(w io.Writer, cfg prodConfig, r prodResult) {
	part := strconv.Itoa(cfg.partition)
	if cfg.partition < 0 {
		part = "spread"
	}
	fmt.Fprintf(w, "bench produce: topic=%s size=%d producers=%d batch=%d inflight=%d sync=%t partition=%s idempotence=%t\n",
		cfg.topic, cfg.size, cfg.producers, cfg.batch, cfg.inflight, cfg.sync, part, cfg.idem)
	fmt.Fprintf(w, "msgs=%d errors=%d elapsed=%.3fs msgs/s=%.0f MB/s=%.2f\n", r.Msgs, r.Errors, r.Elapsed.Seconds(), r.MsgsPerS, r.MBPerS)
	fmt.Fprintf(w, "latency per request: p50=%s p99=%s p99.9=%s requests=%d\n", fmtDur(r.P50), fmtDur(r.P99), fmtDur(r.P999), r.Requests)
}

const benchConsumeHelp = `
Make sure the partition ends with --messages records of --size bytes
(producing them first if it does not; not timed), then read exactly those
records with one consumer: one connection, --depth pipelined gets of
--fetch bytes, every record's CRC checked. Recently written data is read
from the page cache.

With --filter-pass PCT it measures consumer filters instead: it appends
--messages records of --size payload bytes tagged TagA (PCT% of them) or
TagB (not timed), then reads them alternately unfiltered and through the
consumer filter "TagA" (the broker judges every record and sends the
kept ones), --rounds times each, and reports the records examined per
second of both (medians) and their ratio; with --broker-pid, the local
broker's CPU time per record examined, for each.
`

func benchConsumeCmd(e *env) *cobra.Command {
	return leaf(e, "bench consume", "bench consume [--topic T] [--partition P] [--size B] [--messages N]", benchConsumeHelp, func(fs *pflag.FlagSet) func(args []string) error {
		cfg := consConfig{group: "metaq-bench"}
		fs.StringVar(&cfg.topic, "topic", "meta-test", "topic")
		p := fs.Int("partition", 0, "partition")
		fs.IntVar(&cfg.size, "size", 1024, "message size in bytes")
		fs.Int64Var(&cfg.messages, "messages", 100000, "messages to read")
		fs.IntVar(&cfg.depth, "depth", 4, "gets in flight")
		fs.IntVar(&cfg.fetch, "fetch", 2<<20, "bytes per get (the broker clamps it to max_transfer_size)")
		asJSON := fs.Bool("json", false, "print JSON")
		pass := fs.Int("filter-pass", 0, "measure a consumer tag filter passing this `percent` of the records against unfiltered gets (0: off)")
		rounds := fs.Int("rounds", 3, "with --filter-pass: runs of each, alternating")
		brokerPID := fs.Int("broker-pid", 0, "with --filter-pass: also report this local broker process's CPU time per record (Linux /proc)")
		return func(args []string) error {
			if cfg.size < 0 || cfg.messages < 1 || *p < 0 {
				return usagef("--size, --messages and --partition must be positive")
			}
			if *pass < 0 || *pass > 100 || *rounds < 1 {
				return usagef("--filter-pass must be 0 to 100 and --rounds positive")
			}
			cfg.partition = int32(*p)
			if err := checkBroker(e); err != nil {
				return err
			}
			cfg.addr, cfg.sec = e.addr, e.sec
			if *pass > 0 {
				res, err := benchConsumeFilter(e.ctx, cfg, *pass, *rounds, *brokerPID)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(e.stdout, res)
				}
				printConsumeFilter(e.stdout, cfg, res)
				return nil
			}
			res, err := benchConsume(e, cfg)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, res)
			}
			printConsume(e.stdout, cfg, res)
			return nil
		}
	})
}

func benchConsume(e *env, cfg consConfig) (consResult, error) {
	start, filled, err := prepareConsume(e.ctx, cfg, e.timeout)
	if err != nil {
		return consResult{}, err
	}
	cfg.prog = newProgress(e, "bench consume")
	res, err := runConsumeBench(e.ctx, cfg, start)
	res.Filled = filled
	return res, err
}

func printConsume(w io.Writer, cfg consConfig, r consResult) {
	fmt.Fprintf(w, "bench consume: topic=%s partition=%d size=%d messages=%d filled=%d start=%d\n",
		cfg.topic, cfg.partition, cfg.size, cfg.messages, r.Filled, r.Start)
	fmt.Fprintf(w, "msgs=%d elapsed=%.3fs msgs/s=%.0f MB/s=%.2f gets=%d\n", r.Msgs, r.Elapsed.Seconds(), r.MsgsPerS, r.MBPerS, r.Gets)
}

func benchRTTCmd(e *env) *cobra.Command {
	return leaf(e, "bench rtt", "bench rtt [--n N]", `
Round-trip baselines: a 1-line request/reply against an echo server started
in-process on 127.0.0.1, then the broker's version command on one
connection. Prints p50 and p99 of each.`, func(fs *pflag.FlagSet) func(args []string) error {
		n := fs.Int("n", 2000, "round trips")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if *n < 1 {
				return usagef("--n must be positive")
			}
			res, err := runRTTBench(e.ctx, e.sec, e.addr, *n, e.timeout)
			if *asJSON {
				writeJSON(e.stdout, res)
				return err
			}
			fmt.Fprintf(e.stdout, "loopback echo rtt: n=%d p50=%s p99=%s\n", res.N, fmtDur(res.EchoP50), fmtDur(res.EchoP99))
			if err == nil {
				fmt.Fprintf(e.stdout, "broker version rtt: n=%d p50=%s p99=%s addr=%s\n", res.N, fmtDur(res.BrokerP50), fmtDur(res.BrokerP99), e.addr)
			}
			return err
		}
	})
}

func benchRawCmd(e *env) *cobra.Command {
	return leaf(e, "bench raw", "bench raw --dir DIR [--size B] [--batch N] [--seconds S]", `
The raw-disk baseline: append --size byte records to a new file in --dir
in batches of --batch records, one write() and one fdatasync per batch, for
--seconds. The file is removed afterwards.`, func(fs *pflag.FlagSet) func(args []string) error {
		dir := fs.String("dir", ".", "directory to write in (use the broker's data disk)")
		size := fs.Int("size", 1024, "record size in bytes")
		batch := fs.Int("batch", 256, "records per fdatasync")
		secs := fs.Float64("seconds", 3, "how long to run")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if *size < 1 || *batch < 1 || *secs <= 0 {
				return usagef("--size, --batch and --seconds must be positive")
			}
			res, err := runRawBench(e.ctx, *dir, *size, *batch, time.Duration(*secs*float64(time.Second)))
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, res)
			}
			printRaw(e.stdout, res)
			return nil
		}
	})
}

func printRaw(w io.Writer, r rawResult) {
	fmt.Fprintf(w, "bench raw: dir=%s size=%d batch=%d records=%d fdatasyncs=%d elapsed=%.3fs records/s=%.0f MB/s=%.2f\n",
		r.Dir, r.Size, r.Batch, r.Records, r.Fdatasyncs, r.Elapsed.Seconds(), r.RecsPerS, r.MBPerS)
}
