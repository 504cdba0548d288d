package tx

import (
	"testing"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// FuzzTxSync: a txsync body of any bytes, of any kind, never panics
// decodeTxSync; what it accepts is records of the kind's types, each
// verified, with positive ids and partitions of at least 0.
func FuzzTxSync(f *testing.F) {
	msgs := []txMsg{{t: testTopic("t"), p: 0, e: store.Entry{ID: 7, Data: []byte("a")}}, {t: testTopic("t"), p: 1, e: store.Entry{ID: 8, Data: []byte("bc")}}}
	commit := appendTxRecord(nil, txRecCommit, encodeTxCommit("TX:s:1", []txBatchLoc{{topic: "t", partition: 0, notBefore: 40, firstID: 7, n: 1, crc: 1}}), nil)
	for _, fr := range txFrames(protocol.TxSyncCommit, msgs, "TX:s:1", commit, 40) {
		f.Add(fr.Kind, fr.Body)
	}
	f.Add(protocol.TxSyncPrepare, txFrames(protocol.TxSyncPrepare, msgs, "XID:1:aa:01:q",
		appendTxRecord(nil, txRecPrepare, encodeTxPrepare("XID:1:aa:01:q", "u"), nil), 1<<20)[0].Body)
	f.Add(protocol.TxSyncRollback, appendTxRecord(nil, txRecRollback, appendStr(nil, "XID:1:aa:01:q"), nil))
	f.Add(protocol.TxSyncState, []byte{})
	f.Add(protocol.TxSyncState, []byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 2})
	f.Fuzz(func(t *testing.T, kind string, body []byte) {
		m, err := decodeTxSync(kind, body, 1<<20)
		if err != nil {
			return
		}
		for _, p := range m.puts {
			if p.m.e.ID <= 0 || p.m.partition < 0 || len(p.m.e.Data) > 1<<20 {
				t.Fatalf("accepted %+v", p)
			}
		}
		if m.commit != nil {
			for _, l := range m.commit.locs {
				if l.n <= 0 || l.partition < 0 || l.notBefore < 0 {
					t.Fatalf("accepted %+v", l)
				}
			}
		}
	})
}

// TestTxSyncDecode: what the master frames, the slave decodes; frames are
// cut at the limit (a single record may exceed it).
func TestTxSyncDecode(t *testing.T) {
	msgs := []txMsg{{t: testTopic("t"), p: 0, e: store.Entry{ID: 7, Data: []byte("aaaa")}}, {t: testTopic("t"), p: 1, e: store.Entry{ID: 8, Data: []byte("bbbb")}}}
	locs := []txBatchLoc{{topic: "t", partition: 0, notBefore: 40, firstID: 7, n: 1, crc: 3}}
	final := appendTxRecord(nil, txRecCommit, encodeTxCommit("TX:s:1", locs), nil)
	frames := txFrames(protocol.TxSyncCommit, msgs, "TX:s:1", final, 10)
	if len(frames) != 3 || frames[0].Kind != protocol.TxSyncPuts || frames[2].Kind != protocol.TxSyncCommit {
		t.Fatalf("frames %+v", frames)
	}
	var puts []txSyncPut
	for _, fr := range frames {
		m, err := decodeTxSync(fr.Kind, fr.Body, 100)
		if err != nil {
			t.Fatal(err)
		}
		puts = append(puts, m.puts...)
		if fr.Kind == protocol.TxSyncCommit && (m.commit == nil || m.commit.key != "TX:s:1" || m.commit.locs[0] != locs[0]) {
			t.Fatalf("commit %+v", m.commit)
		}
	}
	if len(puts) != 2 || puts[0].m.e.ID != 7 || string(puts[1].m.e.Data) != "bbbb" || puts[1].m.partition != 1 {
		t.Fatalf("puts %+v", puts)
	}
	if _, err := decodeTxSync(protocol.TxSyncCommit, frames[0].Body, 100); err == nil {
		t.Fatal("a commit frame without its commit record was accepted")
	}
	if _, err := decodeTxSync(protocol.TxSyncPuts, frames[0].Body, 3); err == nil {
		t.Fatal("a message over max_message_size was accepted")
	}
	bad := append([]byte(nil), frames[0].Body...)
	bad[len(bad)-1] ^= 1
	if _, err := decodeTxSync(protocol.TxSyncPuts, bad, 100); err == nil {
		t.Fatal("a record with a bad crc was accepted")
	}
}
