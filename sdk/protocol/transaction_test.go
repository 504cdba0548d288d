package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeTransaction(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		key     string
		session string
		typ     TxType
		timeout int64
		qual    string
		opaque  int32
	}{
		{"begin 5 tokens", "transaction TX:s1:1 s1 BEGIN 7\r\n", "TX:s1:1", "s1", TxBegin, 0, "", 7},
		{"begin timeout", "transaction TX:s1:1 s1 BEGIN 30 7\r\n", "TX:s1:1", "s1", TxBegin, 30, "", 7},
		{"xa qualifier", "transaction XID:1:ab:cd:q s BEGIN XAMessageProducer-h 8\r\n", "XID:1:ab:cd:q", "s", TxBegin, 0, "XAMessageProducer-h", 8},
		{"xa timeout qualifier", "transaction XID:1:ab:cd:q s BEGIN 10 q 8\r\n", "XID:1:ab:cd:q", "s", TxBegin, 10, "q", 8},
		{"negative 6th is a qualifier", "transaction XID:1:ab::q s END -1 8\r\n", "XID:1:ab::q", "s", TxEnd, 0, "-1", 8},
		{"7 tokens negative timeout", "transaction TX:s:2 s ROLLBACK -1 q -3\r\n", "TX:s:2", "s", TxRollback, -1, "q", -3},
		{"prepare", "transaction XID:0:00:01:x s PREPARE 1\r\n", "XID:0:00:01:x", "s", TxPrepare, 0, "", 1},
		{"commit one phase", "transaction TX:10.0.0.1-1-1:3 10.0.0.1-1-1 COMMIT_ONE_PHASE 2\r\n", "TX:10.0.0.1-1-1:3", "10.0.0.1-1-1", TxCommitOnePhase, 0, "", 2},
		{"commit two phase", "transaction XID:1:ab:cd:q s COMMIT_TWO_PHASE 2\r\n", "XID:1:ab:cd:q", "s", TxCommitTwoPhase, 0, "", 2},
		{"forget", "transaction XID:1:ab:cd:q s FORGET 2\r\n", "XID:1:ab:cd:q", "s", TxForget, 0, "", 2},
		{"recover null", "transaction null s RECOVER q 4\r\n", "null", "s", TxRecover, 0, "q", 4},
		{"recover no qualifier", "transaction null s RECOVER 4\r\n", "null", "s", TxRecover, 0, "", 4},
		{"ipv6 session", "transaction TX:fe80::1-5-1:9 fe80::1-5-1 BEGIN 1\n", "TX:fe80::1-5-1:9", "fe80::1-5-1", TxBegin, 0, "", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(strings.NewReader(tc.in), Limits{})
			var r Request
			require.NoError(t, d.Decode(&r))
			require.Equal(t, OpTransaction, r.Op)
			require.Equal(t, tc.key, string(r.TxKey))
			require.Equal(t, tc.session, string(r.TxSession))
			require.Equal(t, tc.typ, r.TxType)
			require.Equal(t, tc.timeout, r.TxTimeout)
			require.Equal(t, tc.qual, string(r.TxQualifier))
			require.Equal(t, tc.opaque, r.Opaque)
			require.ErrorIs(t, d.Decode(&r), io.EOF)
		})
	}
}

func TestDecodeTransactionErrors(t *testing.T) {
	cases := []struct {
		name, in, msg string
		opaque        int32
	}{
		{"too few", "transaction TX:s:1 s 3\r\n", "want 5 to 7", 3},
		{"too many", "transaction TX:s:1 s BEGIN 1 q x 3\r\n", "want 5 to 7", 3},
		{"bad opaque", "transaction TX:s:1 s BEGIN x\r\n", "bad opaque", 0},
		{"unknown type", "transaction TX:s:1 s begin 3\r\n", "unknown type", 3},
		{"empty session", "transaction TX:s:1  BEGIN 3\r\n", "empty session", 3},
		{"bad timeout", "transaction TX:s:1 s BEGIN 99999999999 q 3\r\n", "bad timeout", 3},
		{"bad 7-token timeout", "transaction TX:s:1 s BEGIN x q 3\r\n", "bad timeout", 3},
		{"qualifier colon", "transaction TX:s:1 s BEGIN a:b 3\r\n", "qualifier", 3},
		{"qualifier control", "transaction TX:s:1 s BEGIN a\x01b 3\r\n", "qualifier", 3},
		{"null key not recover", "transaction null s BEGIN 3\r\n", "transaction key", 3},
		{"bad key", "transaction XX:1 s BEGIN 3\r\n", "transaction key", 3},
		{"local key no number", "transaction TX:s s BEGIN 3\r\n", "TX:<sessionId>:<n>", 3},
		{"local key bad number", "transaction TX:s:x s BEGIN 3\r\n", "bad number", 3},
		{"local key empty session", "transaction TX::1 s BEGIN 3\r\n", "session id", 3},
		{"xid fields", "transaction XID:1:ab:cd s BEGIN 3\r\n", "want XID", 3},
		{"xid odd hex", "transaction XID:1:abc:cd:q s BEGIN 3\r\n", "even-length hex", 3},
		{"xid not hex", "transaction XID:1:zz:cd:q s BEGIN 3\r\n", "even-length hex", 3},
		{"xid long gtrid", "transaction XID:1:" + strings.Repeat("ab", 65) + ":cd:q s BEGIN 3\r\n", "at most 64", 3},
		{"xid bad format", "transaction XID:x:ab:cd:q s BEGIN 3\r\n", "format id", 3},
		{"xid empty qualifier", "transaction XID:1:ab:cd: s BEGIN 3\r\n", "qualifier", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(strings.NewReader(tc.in+"version 5\r\n"), Limits{})
			var r Request
			err := d.Decode(&r)
			var pe *Error
			require.True(t, errors.As(err, &pe), "%v", err)
			require.False(t, pe.Fatal)
			require.Equal(t, StatusBadRequest, pe.Code)
			require.Equal(t, OpTransaction, pe.Op)
			require.Contains(t, pe.Msg, tc.msg)
			require.Equal(t, tc.opaque, pe.Opaque)
			requireNoControlBytes(t, pe.Msg)
			require.NoError(t, d.Decode(&r), "framing kept")
			require.Equal(t, OpVersion, r.Op)
		})
	}
}

func TestParseTxKey(t *testing.T) {
	id, err := ParseTxKey([]byte("XID:-7:0A0b:ff:XAMessageProducer-host"))
	require.NoError(t, err)
	require.Equal(t, TxID{XA: true, FormatID: -7, Gtrid: []byte{0x0a, 0x0b}, Bqual: []byte{0xff}, Qualifier: "XAMessageProducer-host"}, id)
	require.Equal(t, "XID:-7:0a0b:ff:XAMessageProducer-host", id.String(), "canonical hex is lower case")

	id, err = ParseTxKey([]byte("TX:192.168.1.2-1700000000000-1:007"))
	require.NoError(t, err)
	require.Equal(t, TxID{Session: "192.168.1.2-1700000000000-1", Seq: 7}, id)
	require.Equal(t, "TX:192.168.1.2-1700000000000-1:7", id.String())

	id, err = ParseTxKey([]byte("XID:1:ab::q"))
	require.NoError(t, err, "an empty branch qualifier is allowed")
	require.Empty(t, id.Bqual)
}

func TestAppendTransaction(t *testing.T) {
	require.Equal(t, "transaction TX:s:1 s BEGIN 7\r\n", string(AppendTransaction(nil, "TX:s:1", "s", TxBegin, 0, "", 7)))
	require.Equal(t, "transaction XID:1:ab:cd:q s BEGIN 10 q 7\r\n", string(AppendTransaction(nil, "XID:1:ab:cd:q", "s", TxBegin, 10, "q", 7)))
	require.Equal(t, "transaction null s RECOVER q 7\r\n", string(AppendTransaction(nil, NullTxKey, "s", TxRecover, 0, "q", 7)))
	require.Equal(t, "put t 1 2 0 -1 TX:s:1 9\r\n", string(AppendTxPutHeader(nil, "t", 1, 2, 0, NoChecksum, "TX:s:1", 9)))
	for typ := TxBegin; typ <= TxHeuristicRollback; typ++ {
		got, ok := ParseTxType([]byte(typ.String()))
		require.True(t, ok)
		require.Equal(t, typ, got)
	}
}

func TestXAErrorBody(t *testing.T) {
	b := XAErrorBody(XAErProto, "not prepared\r\nx")
	require.Equal(t, "XAException:code=-6,msg=not prepared  x", b)
	code, msg, ok := ParseXAError([]byte(b))
	require.True(t, ok)
	require.Equal(t, XAErProto, code)
	require.Equal(t, "not prepared  x", msg)
	_, _, ok = ParseXAError([]byte("append failed"))
	require.False(t, ok)
	_, _, ok = ParseXAError([]byte("XAException:code=x,msg=y"))
	require.False(t, ok)
}

// FuzzTransaction feeds arbitrary transaction frames to the decoder: it
// never panics, every error keeps the framing (a transaction has no body),
// and an accepted frame's key parses (or is RECOVER's null), its qualifier
// is valid and its re-encoding decodes to the same request.
func FuzzTransaction(f *testing.F) {
	for _, s := range []string{
		"TX:s1:1 s1 BEGIN 7", "TX:s1:1 s1 BEGIN 30 7", "XID:1:ab:cd:q s BEGIN 10 q 8",
		"XID:1:ab::q s END -1 8", "null s RECOVER q 4", "null s RECOVER 4", "TX:s:1 s begin 3",
		"XID:1:abc:cd:q s PREPARE 3", "TX:fe80::1-5-1:9 fe80::1-5-1 COMMIT_ONE_PHASE 1",
		"XID:1:ab:cd: s FORGET 3", "TX::1 s ROLLBACK 3", "XID:2147483648:ab:cd:q s BEGIN 1",
		"TX:s:1 s BEGIN 1 q x 3", "TX:s:1  BEGIN 3", "XID:1:ab:cd:q\xff s COMMIT_TWO_PHASE 1",
		"TX:s:1 s BEGIN 00000000000000000000000000001 3", "XID:1:ab:cd:q s HEURISTIC_COMMIT 4", "XID:1:ab:cd:q s HEURISTIC_ROLLBACK 5",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.ContainsAny(line, "\r\n") {
			return
		}
		in := append([]byte("transaction "), line...)
		in = append(in, "\r\nversion 5\r\n"...)
		d := NewDecoder(bytes.NewReader(in), Limits{MaxLine: 512})
		var r Request
		err := d.Decode(&r)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("not a protocol error: %v", err)
			}
			requireNoControlBytes(t, pe.Msg)
			if pe.Fatal {
				if len(in) < 512 {
					t.Fatalf("fatal error on a short line: %v", pe)
				}
				return
			}
		} else {
			if r.Op != OpTransaction || r.TxType == TxUnknown {
				t.Fatalf("decoded %v type %v", r.Op, r.TxType)
			}
			if !(r.TxType == TxRecover && string(r.TxKey) == NullTxKey) {
				if _, err := ParseTxKey(r.TxKey); err != nil {
					t.Fatalf("accepted key %q: %v", r.TxKey, err)
				}
			}
			if r.TxQualifier != nil && CheckQualifier(r.TxQualifier) != nil {
				t.Fatalf("accepted qualifier %q", r.TxQualifier)
			}
			want := r
			want.TxKey, want.TxSession, want.TxQualifier = bytes.Clone(r.TxKey), bytes.Clone(r.TxSession), bytes.Clone(r.TxQualifier)
			// A digits-only qualifier without a timeout cannot be re-sent
			// (it would read as the timeout): the wire's own ambiguity.
			if (want.TxTimeout > 0 || want.TxQualifier != nil) && !(want.TxTimeout <= 0 && allDigits(want.TxQualifier)) {
				enc := AppendTransaction(nil, string(want.TxKey), string(want.TxSession), want.TxType, int(want.TxTimeout), string(want.TxQualifier), want.Opaque)
				var r2 Request
				if err := NewDecoder(bytes.NewReader(enc), Limits{}).Decode(&r2); err != nil {
					t.Fatalf("re-encoded %q: %v", enc, err)
				}
				if want.TxTimeout < 0 { // not re-sent
					want.TxTimeout = 0
				}
				if string(r2.TxKey) != string(want.TxKey) || string(r2.TxSession) != string(want.TxSession) ||
					r2.TxType != want.TxType || r2.TxTimeout != want.TxTimeout || string(r2.TxQualifier) != string(want.TxQualifier) {
					t.Fatalf("re-encoded %q decodes to %+v, want %+v", enc, r2, want)
				}
			}
		}
		if err := d.Decode(&r); err != nil || r.Op != OpVersion {
			t.Fatalf("framing lost: %v %v", r.Op, err)
		}
	})
}

// FuzzTxKey parses arbitrary keys: no panic, and an accepted key's
// canonical form parses to the same id and is its own canonical form.
func FuzzTxKey(f *testing.F) {
	for _, s := range []string{
		"TX:s:1", "TX:192.168.1.2-1700000000000-1:007", "TX:fe80::1-5:2", "TX::1", "TX:s:", "TX:s:-9223372036854775808",
		"XID:1:ab:cd:q", "XID:-7:0A0b:ff:XAMessageProducer-host", "XID:1:ab::q", "XID:1::ab:q", "XID:1:ab:cd:",
		"XID:1:ab:cd:q:r", "XID:x:ab:cd:q", "XID:1:" + strings.Repeat("00", 64) + ":" + strings.Repeat("ff", 64) + ":q",
		"XID:1:ab:cd:\u00e9t\u00e9", "XID:1:ab:cd:a\u2028b", "null", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		id, err := ParseTxKey(key)
		if err != nil {
			requireNoControlBytes(t, err.Error())
			return
		}
		if len(id.Gtrid) > MaxXIDPart || len(id.Bqual) > MaxXIDPart {
			t.Fatalf("xid part over %d bytes", MaxXIDPart)
		}
		s := id.String()
		id2, err := ParseTxKey([]byte(s))
		if err != nil {
			t.Fatalf("canonical %q: %v", s, err)
		}
		if id2.String() != s {
			t.Fatalf("canonical %q re-parses as %q", s, id2.String())
		}
	})
}
