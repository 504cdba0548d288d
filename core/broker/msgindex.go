package broker

import (
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/index"
	"github.com/metaq-go/metaq/core/store"
)

// The key and msgId index of the broker's partitions is b.indexes, an
// index.Set (core/index: one Indexer per data directory); with
// index_keys = false it follows no log, and lookups scan the logs.

// indexLogs starts following parts (opened in data directory dir) when
// index_keys is on.
func (b *Broker) indexLogs(dir string, parts []*store.Log) {
	if cfg := b.config(); cfg.IndexKeys {
		b.indexes.Add(dir, parts, index.Options{MaxMessageSize: cfg.MaxMessageSize}, b.logf, b.errorf)
	}
}

// FindMessages looks messages up by key or id in topics' partitions
// (httpapi.Find, over the broker's open topics and b.indexes).
func (h httpBackend) FindMessages(topics []string, q httpapi.FindQuery) (httpapi.FindResult, error) {
	b := h.b
	maxMsg := b.config().MaxMessageSize
	return httpapi.Find(topics, q, httpapi.FindSource{
		Parts:    b.openParts,
		Lookup:   func(l *store.Log, q index.Query) (index.Result, error) { return b.indexes.Lookup(l, q, maxMsg) },
		BrokerID: b.config().BrokerID,
		Indexed:  b.config().IndexKeys,
	}), nil
}
