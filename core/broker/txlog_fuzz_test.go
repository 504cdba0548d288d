package broker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/metaq-go/metaq/conf"
)

// FuzzTxJournal: a transaction journal file of any bytes never takes the
// broker down: New replays it (cutting what does not verify, completing,
// rolling back or keeping what does) or refuses with an error, and a
// broker that opened closes cleanly. Seeds: a journal cut in the middle of
// a commit (writeTxJournal), the same with a zero-filled tail as a killed
// broker leaves it, a torn copy, and nonsense.
func FuzzTxJournal(f *testing.F) {
	src := f.TempDir()
	writeTxJournal(f, src)
	full, err := os.ReadFile(filepath.Join(src, TxDirName, txFileName(1)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add(append(append([]byte(nil), full...), make([]byte, 4096)...))
	f.Add(full[:len(full)/2])
	torn := append([]byte(nil), full...)
	torn[len(torn)/3] ^= 0x5a
	f.Add(torn)
	f.Add([]byte{})
	f.Add([]byte("not a journal at all"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dataDir := t.TempDir()
		dir := filepath.Join(dataDir, TxDirName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, txFileName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := conf.Default()
		cfg.Port = 0
		cfg.DataDir = dataDir
		cfg.NumPartitions = 2
		cfg.UnflushThreshold = 1
		cfg.Topics = []conf.Topic{{Name: "t"}}
		b, err := New(cfg, Options{Logf: func(string, ...any) {}})
		if err != nil {
			return // refused with an error: fine
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close after replay: %v", err)
		}
	})
}
