package repl

import (
	"testing"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestPulledOldDeliveries: a sync slave's puller notes only the
// deliveries of delayed messages it copies (TestPulledDeliveryAboveLastID:
// whatever their ids), and past the bound it forgets the oldest first: a delivery whose sync is still
// in flight stays a dup however many transaction batches (not noted) and
// deliveries copied at a join (never taken) came before and after it.
// (The set was cleared at 4096 entries, batches included: the sync was
// then appended again, the slave holding the delivery twice.)
func TestPulledOldDeliveries(t *testing.T) {
	t.Parallel()
	entry := func(id int64, h message.Headers) store.Entry {
		m := &message.Message{Body: []byte("x"), Headers: h}
		data := m.AppendData(nil)
		return store.Entry{ID: id, Flag: m.Flag(), CRC: message.Checksum(data), Data: data}
	}
	sl := &SlaveLog{}
	sl.PulledAppended([]store.Entry{entry(1_000_000, nil)})
	for i := range maxPulledOld - 1 { // copied at a join: no sync takes them
		sl.PulledAppended([]store.Entry{testDelivery(int64(100_000 + i))})
	}
	sl.PulledAppended([]store.Entry{testDelivery(5)}) // its sync is in flight
	batch := make([]store.Entry, 2*maxPulledOld)      // a transaction's batches
	for i := range batch {
		batch[i] = entry(int64(10+i), nil)
	}
	sl.PulledAppended(batch)
	for i := range 100 {
		sl.PulledAppended([]store.Entry{testDelivery(int64(900_000 + i))})
	}
	if len(sl.pulledOld) > maxPulledOld {
		t.Fatalf("%d ids noted, bound %d", len(sl.pulledOld), maxPulledOld)
	}
	if !sl.TakePulledOld(5) {
		t.Fatal("the delivery whose sync is in flight was forgotten: its sync would be appended twice")
	}
	if sl.TakePulledOld(5) || sl.TakePulledOld(20) {
		t.Fatal("taken twice, or a batch's id noted")
	}
	if !sl.TakePulledOld(900_099) || sl.TakePulledOld(100_000) {
		t.Fatal("the newest should stay, the oldest go")
	}
	for i := range 4 * maxPulledOld { // taken as they come: the queue stays bounded
		sl.PulledAppended([]store.Entry{testDelivery(int64(200_000 + i))})
		sl.TakePulledOld(int64(200_000 + i))
	}
	if len(sl.pulledQ) > 2*maxPulledOld+1 {
		t.Fatalf("queue of %d ids", len(sl.pulledQ))
	}
	if want := int64(1_000_000); sl.lastID != want {
		t.Fatalf("lastID %d, want %d", sl.lastID, want)
	}
}
