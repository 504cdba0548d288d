package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// armSample is what bench produce --ab reads before and after each run to
// tell where an arm's cost goes: the broker's user and system CPU and
// context switches (from /proc, when the broker runs on this host), this
// process's CPU (the load generator shares the machine), and the broker's
// journal and key index counters (from its /metrics, when it has an HTTP
// listener).
type armSample struct {
	brokerUser, brokerSys time.Duration
	volCS, involCS        int64 // summed over the broker's threads
	client                time.Duration
	rounds, fsyncs, jbyte int64 // metaq_journal_*
	kiBytes               int64 // metaq_key_index_bytes
	gcs, allocs, mallocs  int64 // the Go runtime's: GC cycles, heap bytes and objects allocated
	heap                  int64 // heap bytes in use
	procOK, metricsOK     bool
}

// armProbe samples one broker.
type armProbe struct {
	pid     int
	metrics string // the broker's HTTP host:port, or ""
	timeout time.Duration
}

func newArmProbe(e *env, pid int) *armProbe {
	p := &armProbe{pid: pid, timeout: 5 * time.Second}
	adm, err := newAdmin(e)
	if err != nil {
		return p
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	if h, err := adm.HTTPAddr(ctx, e.addr); err == nil && h != "" {
		p.metrics = h
	}
	return p
}

func (p *armProbe) sample(ctx context.Context) armSample {
	var s armSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if p.pid > 0 {
		s.brokerUser, s.brokerSys, s.procOK = procCPUSplit(p.pid)
		s.volCS, s.involCS = procCtxSwitches(p.pid)
	}
	if p.metrics != "" {
		s.metricsOK = p.scrape(ctx, &s)
	}
	return s
}

// scrape reads the journal and key index counters (summed over data
// directories) and the Go runtime's from the broker's /metrics.
func (p *armProbe) scrape(ctx context.Context, s *armSample) bool {
	m, ok := scrapeMetrics(ctx, p.metrics, p.timeout)
	if !ok {
		return false
	}
	for name, dst := range map[string]*int64{
		"metaq_journal_commit_rounds_total": &s.rounds,
		"metaq_journal_fsyncs_total":        &s.fsyncs,
		"metaq_journal_written_bytes_total": &s.jbyte,
		"metaq_key_index_bytes":             &s.kiBytes,
		"go_gc_duration_seconds_count":      &s.gcs,
		"go_memstats_alloc_bytes_total":     &s.allocs,
		"go_memstats_mallocs_total":         &s.mallocs,
		"go_memstats_heap_alloc_bytes":      &s.heap,
	} {
		*dst = int64(m.counters[name])
	}
	return true
}

// procCPUSplit returns pid's user and system CPU time (/proc/<pid>/stat).
func procCPUSplit(pid int) (user, sys time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// The command name (field 2) may hold spaces: count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 { // utime and stime are fields 14 and 15, f[11] and f[12]
		return 0, 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	const clkTck = 100 // USER_HZ: 100 on every Linux architecture Go supports
	return time.Duration(ut) * time.Second / clkTck, time.Duration(st) * time.Second / clkTck, true
}

// procCtxSwitches sums the voluntary and involuntary context switches of
// pid's threads (/proc/<pid>/task/*/status).
func procCtxSwitches(pid int) (vol, invol int64) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "voluntary_ctxt_switches":
				vol += n
			case "nonvoluntary_ctxt_switches":
				invol += n
			}
		}
	}
	return vol, invol
}

// armCost is one run's costs per message (what armSample's differences
// give).
type armCost struct {
	user, sys, client float64 // µs per message
	vol, invol        float64 // context switches per 1,000 messages
	perRound          float64 // messages per journal round
	fsyncPerRound     float64
	jbytes            float64 // journal bytes per message
	kiBytes           int64   // key index file bytes added (a seal when large)
	gcs               int64   // GC cycles
	allocB, mallocs   float64 // heap bytes and objects allocated per message
	heapMB            float64 // heap in use at the end, MiB
	procOK, metricsOK bool
}

func armCostOf(a, b armSample, msgs int64) armCost {
	c := armCost{procOK: a.procOK && b.procOK, metricsOK: a.metricsOK && b.metricsOK}
	if msgs <= 0 {
		return c
	}
	n := float64(msgs)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 / n }
	c.client = us(b.client - a.client)
	if c.procOK {
		c.user, c.sys = us(b.brokerUser-a.brokerUser), us(b.brokerSys-a.brokerSys)
		c.vol, c.invol = float64(b.volCS-a.volCS)*1000/n, float64(b.involCS-a.involCS)*1000/n
	}
	if c.metricsOK {
		if r := b.rounds - a.rounds; r > 0 {
			c.perRound = n / float64(r)
			c.fsyncPerRound = float64(b.fsyncs-a.fsyncs) / float64(r)
		}
		c.jbytes = float64(b.jbyte-a.jbyte) / n
		c.kiBytes = b.kiBytes - a.kiBytes
		c.gcs = b.gcs - a.gcs
		c.allocB, c.mallocs = float64(b.allocs-a.allocs)/n, float64(b.mallocs-a.mallocs)/n
		c.heapMB = float64(b.heap) / (1 << 20)
	}
	return c
}

// String is the run's detail line.
func (c armCost) String() string {
	var sb strings.Builder
	if c.procOK {
		fmt.Fprintf(&sb, "broker user=%.2fµs sys=%.2fµs per msg, context switches per 1000 msgs vol=%.0f invol=%.0f; ",
			c.user, c.sys, c.vol, c.invol)
	}
	fmt.Fprintf(&sb, "client CPU/msg=%.2fµs", c.client)
	if c.metricsOK {
		fmt.Fprintf(&sb, "; journal msgs/round=%.1f fsyncs/round=%.2f bytes/msg=%.0f key index +%d bytes; GCs=%d alloc/msg=%.0fB %.2f objects heap=%.0fMiB",
			c.perRound, c.fsyncPerRound, c.jbytes, c.kiBytes, c.gcs, c.allocB, c.mallocs, c.heapMB)
	}
	return sb.String()
}

// printArmMedians prints each arm's medians of the detail figures, and
// the ratio on/off of each.
func printArmMedians(w io.Writer, costs map[bool][]armCost) {
	if len(costs[false]) == 0 || len(costs[true]) == 0 {
		return
	}
	med := func(on bool, f func(armCost) float64) float64 {
		v := make([]float64, 0, len(costs[on]))
		for _, c := range costs[on] {
			v = append(v, f(c))
		}
		return median(v)
	}
	line := func(name, unit string, f func(armCost) float64) {
		off, on := med(false, f), med(true, f)
		r := "?"
		if off > 0 {
			r = fmt.Sprintf("%.3fx", on/off)
		}
		fmt.Fprintf(w, "  %s: off %.2f%s, on %.2f%s, on/off %s\n", name, off, unit, on, unit, r)
	}
	fmt.Fprintf(w, "medians per arm:\n")
	c0 := costs[false][0]
	if c0.procOK {
		line("broker user CPU per message", "µs", func(c armCost) float64 { return c.user })
		line("broker system CPU per message", "µs", func(c armCost) float64 { return c.sys })
		line("broker voluntary context switches per 1000 messages", "", func(c armCost) float64 { return c.vol })
		line("broker involuntary context switches per 1000 messages", "", func(c armCost) float64 { return c.invol })
	}
	line("client CPU per message", "µs", func(c armCost) float64 { return c.client })
	if c0.metricsOK {
		line("messages per journal round", "", func(c armCost) float64 { return c.perRound })
		line("journal bytes per message", "", func(c armCost) float64 { return c.jbytes })
		line("broker GC cycles", "", func(c armCost) float64 { return float64(c.gcs) })
		line("broker heap bytes allocated per message", "", func(c armCost) float64 { return c.allocB })
	}
}
