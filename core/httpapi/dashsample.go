package httpapi

import (
	"slices"
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/security"
)

// The dashboard's samples (docs/dashboard.md): every dashSampleEvery the
// server notes each group's lag (from the offsets committed through it,
// as the metrics do: no offset store call) into a ring that holds the last
// hour, and each topic's traffic counters, from which the topics page
// shows rates over the last interval. Memory is bounded: at most
// dashMaxRings group/topic rings of dashSamples points.

const (
	dashSampleEvery = 15 * time.Second
	dashSamples     = int(time.Hour / dashSampleEvery) // one hour
	dashMaxRings    = 1000
)

type lagPoint struct {
	At  time.Time
	Lag int64
}

// lagRing is the last dashSamples lag points of one group and topic.
type lagRing struct {
	ring[lagPoint]
	seen time.Time
}

// ring is the last dashSamples points of a series, oldest overwritten.
type ring[T any] struct {
	pts  [dashSamples]T
	n    int // points held
	next int // index of the next write
}

func (r *ring[T]) add(p T) {
	r.pts[r.next] = p
	r.next = (r.next + 1) % dashSamples
	r.n = min(r.n+1, dashSamples)
}

// points returns the points oldest first.
func (r *ring[T]) points() []T {
	out := make([]T, 0, r.n)
	for i := range r.n {
		out = append(out, r.pts[(r.next-r.n+i+dashSamples)%dashSamples])
	}
	return out
}

// ratePoint is a topic's (or the broker's) throughput in and out over
// one sample interval, in bytes per second.
type ratePoint struct {
	At      time.Time
	In, Out float64
}

// rateRing is the last dashSamples rate points.
type rateRing = ring[ratePoint]

type topicSample struct {
	at                        time.Time
	msgsIn, bytesIn, bytesOut int64
}

// topicRate is a topic's traffic per second over the last sample interval.
type topicRate struct {
	MsgsIn, BytesIn, BytesOut float64
	Over                      time.Duration
}

// dashState is the dashboard's state: samples and the CSRF key.
type dashState struct {
	csrfOnce sync.Once
	csrfKey  []byte

	mu     sync.Mutex
	lags   map[groupTopic]*lagRing
	last   map[string]topicSample
	lastAt time.Time
	rates  map[string]topicRate
	// Throughput over the last hour: by topic (at most dashMaxRings) and
	// of the whole broker.
	rateRings map[string]*rateRing
	total     rateRing
}

// groupTopic names a group's positions on a topic.
type groupTopic struct{ group, topic string }

// TopicTraffic is a topic's traffic counters since start.
type TopicTraffic struct {
	Name                      string
	MsgsIn, BytesIn, BytesOut int64
}

// GroupLag is a group's lag on a topic in bytes, from the offsets
// committed through the broker (no offset store call).
type GroupLag struct {
	Group, Topic string
	Lag          int64
}

// sampleLoop samples every dashSampleEvery until the server closes.
func (s *Server) sampleLoop() {
	defer s.wg.Done()
	s.Sample(time.Now())
	t := time.NewTicker(dashSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.Sample(now)
		}
	}
}

// Sample takes one sample dated now (the server takes one every
// dashSampleEvery; tests date theirs).
func (s *Server) Sample(now time.Time) {
	samples := map[string]topicSample{}
	for _, t := range s.be.Traffic() {
		samples[t.Name] = topicSample{at: now, msgsIn: t.MsgsIn, bytesIn: t.BytesIn, bytesOut: t.BytesOut}
	}
	lags := s.be.Lags()

	d := &s.dash
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lags == nil {
		d.lags = map[groupTopic]*lagRing{}
	}
	// Rates need a later sample than the last (a sample dated earlier,
	// as tests take, leaves them).
	if now.After(d.lastAt) {
		rates := make(map[string]topicRate, len(samples))
		for name, x := range samples {
			if p, ok := d.last[name]; ok {
				sec := x.at.Sub(p.at).Seconds()
				rates[name] = topicRate{MsgsIn: float64(x.msgsIn-p.msgsIn) / sec, BytesIn: float64(x.bytesIn-p.bytesIn) / sec,
					BytesOut: float64(x.bytesOut-p.bytesOut) / sec, Over: x.at.Sub(p.at)}
			}
		}
		d.last, d.rates, d.lastAt = samples, rates, now
		if len(rates) > 0 {
			d.addRates(now, rates)
		}
	}
	for _, l := range lags {
		k := groupTopic{l.Group, l.Topic}
		r := d.lags[k]
		if r == nil {
			if len(d.lags) >= dashMaxRings {
				continue
			}
			r = &lagRing{}
			d.lags[k] = r
		}
		r.add(lagPoint{now, l.Lag})
		r.seen = now
	}
	// Forget groups not seen for an hour (their topic went).
	for k, r := range d.lags {
		if now.Sub(r.seen) > time.Hour {
			delete(d.lags, k)
		}
	}
}

// addRates notes the rates of one interval ending at now; d.mu is held.
func (d *dashState) addRates(now time.Time, rates map[string]topicRate) {
	if d.rateRings == nil {
		d.rateRings = map[string]*rateRing{}
	}
	var tot ratePoint
	tot.At = now
	for name, rt := range rates {
		tot.In += rt.BytesIn
		tot.Out += rt.BytesOut
		r := d.rateRings[name]
		if r == nil {
			if len(d.rateRings) >= dashMaxRings {
				continue
			}
			r = &rateRing{}
			d.rateRings[name] = r
		}
		r.add(ratePoint{now, rt.BytesIn, rt.BytesOut})
	}
	for name := range d.rateRings { // topics deleted
		if _, ok := rates[name]; !ok {
			delete(d.rateRings, name)
		}
	}
	d.total.add(tot)
}

// rateTrend returns the throughput points of topic ("" for the whole
// broker), oldest first.
func (s *Server) rateTrend(topic string) []ratePoint {
	d := &s.dash
	d.mu.Lock()
	defer d.mu.Unlock()
	if topic == "" {
		return d.total.points()
	}
	if r := d.rateRings[topic]; r != nil {
		return r.points()
	}
	return nil
}

// rateTrendFor is the broker's throughput as v may see it: the whole
// broker's for an admin (or without [auth]), else the sum of the topics
// v may describe.
func (s *Server) rateTrendFor(v security.Viewer) []ratePoint {
	if v.All() {
		return s.rateTrend("")
	}
	d := &s.dash
	d.mu.Lock()
	defer d.mu.Unlock()
	sum := map[time.Time]*ratePoint{}
	var order []time.Time
	for name, r := range d.rateRings {
		if !v.Topic(name) {
			continue
		}
		for _, p := range r.points() {
			x := sum[p.At]
			if x == nil {
				x = &ratePoint{At: p.At}
				sum[p.At] = x
				order = append(order, p.At)
			}
			x.In += p.In
			x.Out += p.Out
		}
	}
	slices.SortFunc(order, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]ratePoint, 0, len(order))
	for _, at := range order {
		out = append(out, *sum[at])
	}
	return out
}

// lagTrend returns the lag points of group and topic, oldest first.
func (s *Server) lagTrend(group, topic string) []lagPoint {
	d := &s.dash
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.lags[groupTopic{group, topic}]; r != nil {
		return r.points()
	}
	return nil
}

// topicRates returns the last rates by topic.
func (s *Server) topicRates() map[string]topicRate {
	d := &s.dash
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]topicRate, len(d.rates))
	for k, v := range d.rates {
		out[k] = v
	}
	return out
}
