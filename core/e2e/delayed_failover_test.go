package e2e

import (
	"time"

	"testing"

	mqclient "github.com/metaq-go/metaq/sdk/client"
)

// TestDelayedFailover: a sync master with failover takes delayed messages
// (due 200 ms to 3.2 s after their sends) through a ZooKeeper producer and
// is killed with -9 while they fall due; the slave is promoted, rebuilds
// its wheel from its copy of the timer log and delivers: every delayed
// message the old master acknowledged is delivered by the new master,
// none early; duplicates (by msgId) are counted.
func TestDelayedFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterSpec{Config: failoverConfig(), SessionTimeout: foSession})
	master := startRepl(t, c, 1, -1, "")
	slave := startRepl(t, c, 1, 1, "")
	waitStat(t, master, "failover_insync", "s1", 20*time.Second)
	p := c.newProducer(t, mqclient.ProduceTimeout(foSession+30*time.Second))
	const topic = "repl"
	parts := replTopics[topic]
	w := newDelayedWatch(topic, parts)
	w.follow(master.Addr)
	go w.run()
	defer func() {
		select {
		case <-w.done:
		default:
			w.halt()
		}
	}()
	stop := make(chan struct{})
	res := make(chan []delayedSent)
	go func() {
		res <- delayedLoad(p, topic, delayedCrashSpan(t), foSession+30*time.Second, uint64(time.Now().UnixNano()), stop)
	}()
	time.Sleep(time.Second) // the master delivers the first ones
	master.kill9(t)
	killed := time.Now()
	w.follow(slave.Addr)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	sent := <-res
	t.Logf("%d delayed messages acknowledged, the last %v after the kill", len(sent), time.Since(killed).Round(time.Millisecond))
	waitStat(t, slave, "failover_role", "master", 30*time.Second)
	if dups := delayedCheck(t, slave.Addr, topic, parts, sent, w); dups > 0 {
		t.Errorf("%d duplicate deliveries after the failover (want exactly once)", dups)
	}
}
