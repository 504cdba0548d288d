package broker

import (
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
)

// openJournals opens the group-commit journals of the data directories
// server.toml names (partition.OpenJournals).
func (b *Broker) openJournals() error {
	js, err := partition.OpenJournals(b.config(), b.logf, b.metrics.JournalObserver())
	if err != nil {
		return err
	}
	b.journals = js
	return nil
}

// journalFor is b.journals.For.
func (b *Broker) journalFor(dir string, unflushThreshold int) *store.Journal {
	return b.journals.For(dir, unflushThreshold)
}
