package repl

import (
	"testing"

	"github.com/metaq-go/metaq/sdk/message"
)

func TestSyncChecks(t *testing.T) {
	kind := func(err error) Kind {
		if err == nil {
			return 0
		}
		return err.(*Error).Kind
	}
	if k := kind(CheckSync(1, 11, 10)); k != Invalid {
		t.Fatalf("oversized: kind %d", k)
	}
	if k := kind(CheckSync(0, 1, 10)); k != Invalid {
		t.Fatalf("id 0: kind %d", k)
	}
	if err := CheckSync(1, 10, 10); err != nil {
		t.Fatal(err)
	}
	body := []byte("hello")
	crc := int64(message.Checksum(body))
	if _, err := SyncEntry(5, 0, body, true, crc+1); kind(err) != NotStored || err.Error() != "sync: checksum mismatch" {
		t.Fatalf("bad checksum: %v", err)
	}
	e, err := SyncEntry(5, 0, body, true, crc)
	if err != nil || e.ID != 5 || int64(e.CRC) != crc || string(e.Data) != "hello" {
		t.Fatalf("entry %+v, %v", e, err)
	}
}
