package client

import (
	"container/list"
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
// dropped and counted. Safe for concurrent use.
type idCache struct {
	mu      sync.Mutex
	size    int
	ll      *list.List // front: most recently handled; values are idKey
	byKey   map[idKey]*list.Element
	dropped atomic.Int64
}

func newIDCache(size int) *idCache {
	return &idCache{size: size, ll: list.New(), byKey: make(map[idKey]*list.Element, size)}
}

// drop reports whether the message with id on topic was handled already
// (it then counts as dropped and becomes the most recent entry). A nil
// cache, or an id of 0 (none), drops nothing.
func (c *idCache) drop(topic string, id int64) bool {
	if c == nil || id == 0 {
		return false
	}
	c.mu.Lock()
	e, ok := c.byKey[idKey{topic, id}]
	if ok {
		c.ll.MoveToFront(e)
	}
	c.mu.Unlock()
	if ok {
		c.dropped.Add(1)
	}
	return ok
}

// handled records that the message with id on topic was handled,
// evicting the least recently handled id beyond the cache's size.
func (c *idCache) handled(topic string, id int64) {
	if c == nil || id == 0 {
		return
	}
	k := idKey{topic, id}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[k]; ok {
		c.ll.MoveToFront(e)
		return
	}
	c.byKey[k] = c.ll.PushFront(k)
	if c.ll.Len() > c.size {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.byKey, old.Value.(idKey))
	}
}

// len returns the number of ids held.
func (c *idCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
