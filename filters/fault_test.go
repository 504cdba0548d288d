//go:build linux

package filters_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// childPIDs lists this process's children running the binary at path.
func childPIDs(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != path {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// restartBudget is how long a killed plugin may take to be back and
// filtering: 1 s, or 2 s when the broker side runs under the race
// detector, as in plugins/host (a plain build took about 90 ms; under
// -race on a loaded 2-core machine the plugin client's start alone took
// 150-700 ms).
func restartBudget() time.Duration {
	if raceEnabled {
		return 2 * time.Second
	}
	return time.Second
}

// TestBrokerFilterPluginKilled kills -9 the filter plugin while a consumer
// reads and a producer writes. The broker keeps serving per the failure
// policy (open: unfiltered; closed: 503, which the consumer backs off
// from), the supervisor has the plugin back and filtering within 1 s (2 s
// under -race: restartBudget), and the consumer gets every matching
// message exactly once, in order.
func TestBrokerFilterPluginKilled(t *testing.T) {
	// Not parallel: it counts this binary's plugin processes.
	bin := examplePlugin(t)
	for _, policy := range []string{"open", "closed"} {
		t.Run(policy, func(t *testing.T) {
			b := startBroker(t, []conf.TopicFilter{{Group: "reds", Filter: "regexp", FailurePolicy: policy,
				Config: map[string]string{"match": "^red$"}}},
				conf.Plugin{Kind: conf.PluginKindFilter, Name: "regexp", Path: bin})
			pids := childPIDs(bin)
			require.Len(t, pids, 1, "one plugin process")

			// Producer: red and blue, about one message per millisecond.
			p, err := client.New(client.Brokers(b.Addr()))
			require.NoError(t, err)
			defer p.Close(context.Background())
			var (
				mu   sync.Mutex
				reds []int64 // offsets of red messages, in order
			)
			stopProd := make(chan struct{})
			prodDone := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stopProd:
						prodDone <- nil
						return
					default:
					}
					attr := "blue"
					if i%3 == 0 {
						attr = "red"
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					res, err := p.ProduceSync(ctx, &message.Message{Topic: "t", Body: []byte("m" + strconv.Itoa(i)), Attribute: attr, HasAttribute: true})
					cancel()
					if err != nil {
						prodDone <- err
						return
					}
					if attr == "red" {
						mu.Lock()
						reds = append(reds, res[0].Offset)
						mu.Unlock()
					}
					time.Sleep(time.Millisecond)
				}
			}()

			// Consumer of the filtered group.
			c, err := client.New(client.Brokers(b.Addr()), client.ConsumeTopics("t"), client.ConsumerGroup("reds"),
				client.ConsumeFrom(client.Earliest), client.FetchMaxBytes(4096), client.FetchMaxWait(100*time.Millisecond))
			require.NoError(t, err)
			defer c.Close(context.Background())
			cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer ccancel()
			var (
				gmu sync.Mutex
				got []*message.Message
			)
			consDone := make(chan error, 1)
			go func() {
				for m, err := range c.Messages(cctx) {
					if err != nil {
						consDone <- err
						return
					}
					mm := *m
					gmu.Lock()
					got = append(got, &mm)
					gmu.Unlock()
				}
				consDone <- nil
			}()

			time.Sleep(300 * time.Millisecond)
			require.NoError(t, syscall.Kill(pids[0], syscall.SIGKILL))
			killed := time.Now()

			// Poll with raw gets until a filtered reply comes back.
			rc := dial(t, b.Addr())
			degraded, recovered := 0, time.Duration(0)
			for time.Since(killed) < 5*time.Second {
				r := rc.get(t, "reds", 0, 4096)
				switch {
				case r.Op == protocol.OpFValue || r.Code == protocol.StatusMoved:
					recovered = time.Since(killed)
				case policy == "open" && r.Op == protocol.OpValue:
					degraded++ // served unfiltered
				case policy == "closed" && r.Op == protocol.OpResult && r.Code == protocol.StatusBusy:
					require.Contains(t, string(r.Body), "filter regexp unavailable")
					degraded++
				default:
					t.Fatalf("policy %s: unexpected reply %s %d %q", policy, r.Op, r.Code, r.Body)
				}
				if recovered > 0 {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			require.NotZero(t, recovered, "no filtered reply within 5 s of the kill")
			require.Positive(t, degraded, "the broker served no get per the failure policy while the plugin was down")
			require.LessOrEqual(t, recovered, restartBudget(), "plugin back and filtering within %v", restartBudget())
			now := childPIDs(bin)
			require.Len(t, now, 1)
			require.NotEqual(t, pids[0], now[0], "a new plugin process")
			t.Logf("policy %s: %d degraded gets; filtering again %v after the kill", policy, degraded, recovered.Round(time.Millisecond))

			time.Sleep(300 * time.Millisecond)
			close(stopProd)
			require.NoError(t, <-prodDone)
			mu.Lock()
			want := append([]int64(nil), reds...)
			mu.Unlock()

			// Wait for the consumer to catch up with every red message.
			require.Eventually(t, func() bool {
				gmu.Lock()
				defer gmu.Unlock()
				return len(got) > 0 && got[len(got)-1].Offset >= want[len(want)-1]
			}, 20*time.Second, 10*time.Millisecond)
			ccancel()
			require.NoError(t, <-consDone)

			gmu.Lock()
			defer gmu.Unlock()
			var redGot []int64
			blue := 0
			for _, m := range got {
				if m.Attribute == "red" {
					redGot = append(redGot, m.Offset)
				} else {
					blue++
				}
			}
			require.Equal(t, want, redGot, "every red message exactly once, in order")
			if policy == "closed" {
				require.Zero(t, blue, "closed: nothing unfiltered reaches the consumer")
			}
			t.Logf("policy %s: consumer got %d red and %d unfiltered messages", policy, len(redGot), blue)
		})
	}
}
