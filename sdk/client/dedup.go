package client

import (
	"sync"
	"sync/atomic"
)

// DefaultMessageIDCacheSize is how many message ids a consuming Client
// remembers to drop redeliveries (MetaQ 1.4.6's MessageIdCache, on by
// default there with metaq.consumer.message_ids.lru_cache.size 4096).
const DefaultMessageIDCacheSize = 4096

// idKey is one handled message in an idCache: a msgId is unique on its
// broker (its id bits), and a promoted slave serves the master's ids.
type idKey struct {
	topic string
	id    int64
}

// idCache is a bounded LRU of the message ids a Client's handler (or its
// Messages loop) has handled, shared by all its partitions and brokers:
// a message fetched again (an offset reset, a rebalance that brings a
// partition back, a redelivery after a commit failed) whose id is in it is
// dropped and counted. The entries are a fixed slice linked by index (no
// allocation per message once full). Safe for concurrent use.
type idCache struct {
	mu      sync.Mutex
	size    int
	ents    []idEntry // up to size; ents[head] the most recently handled
	head    int32     // -1: empty
	byKey   map[idKey]int32
	dropped atomic.Int64
}

// idEntry is one id of an idCache, in its ring of recency.
type idEntry struct {
	key        idKey
	prev, next int32 // neighbours in recency order (a circular list)
}

func newIDCache(size int) *idCache {
	return &idCache{size: size, head: -1, byKey: make(map[idKey]int32, size)}
}

// unlink takes entry i out of the ring (not the last one).
func (c *idCache) unlink(i int32) {
	e := &c.ents[i]
	c.ents[e.prev].next, c.ents[e.next].prev = e.next, e.prev
	if c.head == i {
		c.head = e.next
	}
}

// pushFront links entry i in as the most recent (head).
func (c *idCache) pushFront(i int32) {
	if c.head < 0 {
		c.ents[i].prev, c.ents[i].next, c.head = i, i, i
		return
	}
	h := c.head
	t := c.ents[h].prev
	c.ents[i].prev, c.ents[i].next = t, h
	c.ents[t].next, c.ents[h].prev = i, i
	c.head = i
}

// touch makes entry i the most recent.
func (c *idCache) touch(i int32) {
	if c.head == i {
		return
	}
	c.unlink(i)
	c.pushFront(i)
}

// drop reports whether the message with id on topic was handled already
// (it then counts as dropped and becomes the most recent entry). A nil
// cache, or an id of 0 (none), drops nothing.
func (c *idCache) drop(topic string, id int64) bool {
	if c == nil || id == 0 {
		return false
	}
	c.mu.Lock()
	i, ok := c.byKey[idKey{topic, id}]
	if ok {
		c.touch(i)
	}
	c.mu.Unlock()
	if ok {
		c.dropped.Add(1)
	}
	return ok
}

// handled records that the message with id on topic was handled; once
// full, the least recently handled id makes room.
func (c *idCache) handled(topic string, id int64) {
	if c == nil || id == 0 {
		return
	}
	k := idKey{topic, id}
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.byKey[k]; ok {
		c.touch(i)
		return
	}
	if len(c.ents) < c.size {
		i := int32(len(c.ents))
		c.ents = append(c.ents, idEntry{key: k})
		c.pushFront(i)
		c.byKey[k] = i
		return
	}
	// Reuse the least recent entry, the head's predecessor: it becomes
	// the head by moving the head back one step.
	i := c.ents[c.head].prev
	delete(c.byKey, c.ents[i].key)
	c.ents[i].key = k
	c.head = i
	c.byKey[k] = i
}

// len returns the number of ids held.
func (c *idCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ents)
}
