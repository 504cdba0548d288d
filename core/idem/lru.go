package idem

// The table's least-recently-used order, kept by use stamps instead of a
// linked list: a put of a producer writes the producer's stamp (the
// table's use counter, incremented) and appends (producer, stamp) to
// order, the table's uses oldest first; nothing else is touched (a list's
// move to the front wrote the producer's neighbours and the list's root,
// other producers' cache lines, on every put). A use leaves the
// producer's earlier entry stale (its stamp is no longer the producer's):
// oldest skips stale entries, and order is compacted when it holds more
// stale entries than live ones, so it stays within 2 x producers + slack
// and the work per put is constant on average. The order is exact: the
// producer oldest returns is the least recently used one, as the list's
// back was.

// use is one entry of order: producer p was used at stamp.
type use struct {
	p     *producer
	stamp int64
}

// orderSlack is how many stale entries order may hold beyond the live
// ones' count before it is compacted (a few producers compact at once).
const orderSlack = 32

// touch makes p the most recently used producer.
func (t *Table) touch(p *producer) {
	if t.newest == p { // already the newest: its entry is order's last
		return
	}
	live := len(t.producers)
	if n := len(t.order) - t.head; n >= 2*live+orderSlack {
		t.compact()
	}
	t.stamp++
	p.stamp = t.stamp
	t.order = append(t.order, use{p: p, stamp: p.stamp})
	t.newest = p
}

// compact drops order's stale entries (those of producers used again
// since, or forgotten), keeping the live ones in their order.
func (t *Table) compact() {
	n := 0
	for _, u := range t.order[t.head:] {
		if u.p.stamp == u.stamp {
			t.order[n] = u
			n++
		}
	}
	clear(t.order[n:])
	t.order, t.head = t.order[:n], 0
}

// oldest returns the least recently used producer (nil: none), dropping
// the stale entries before it.
func (t *Table) oldest() *producer {
	for t.head < len(t.order) {
		u := t.order[t.head]
		if u.p.stamp == u.stamp {
			return u.p
		}
		t.order[t.head] = use{}
		t.head++
	}
	t.order, t.head = t.order[:0], 0
	return nil
}

// unlink takes p out of the order (it is forgotten): its entry goes stale.
func (t *Table) unlink(p *producer) {
	p.stamp = 0 // stamps start at 1
	if t.newest == p {
		t.newest = nil
	}
}

// resetOrder empties the order (every producer forgotten).
func (t *Table) resetOrder() {
	for _, u := range t.order[t.head:] {
		u.p.stamp = 0
	}
	clear(t.order)
	t.order, t.head, t.newest = t.order[:0], 0, nil
}

// prepend puts ps (oldest first) before every producer in the order, as
// less recently used than all of them (a rebuild's producers, read from
// the log, against puts that raced it). The stamps are renumbered.
func (t *Table) prepend(ps []*producer) {
	if len(ps) == 0 {
		return
	}
	t.compact()
	order := make([]use, 0, len(ps)+len(t.order))
	for _, p := range ps {
		order = append(order, use{p: p})
	}
	order = append(order, t.order...)
	for i := range order {
		order[i].stamp = int64(i + 1)
		order[i].p.stamp = order[i].stamp
	}
	t.order, t.head, t.stamp = order, 0, int64(len(order))
	t.newest = order[len(order)-1].p
}
