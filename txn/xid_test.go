package txn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/txn"
)

func TestXIDKey(t *testing.T) {
	t.Parallel()
	x := txn.XID{FormatID: 1, Gtrid: []byte{0xab, 0x01}, Bqual: []byte("1")}
	k, err := x.Key("XAMessageProducer-host")
	require.NoError(t, err)
	require.Equal(t, "XID:1:ab01:31:XAMessageProducer-host", k)
	got, q, err := txn.ParseKey(k)
	require.NoError(t, err)
	require.True(t, got.Equal(x))
	require.Equal(t, "XAMessageProducer-host", q)
	got, _, err = txn.ParseKey("XID:-7:AB01::q")
	require.NoError(t, err, "uppercase hex and an empty bqual parse")
	require.True(t, got.Equal(txn.XID{FormatID: -7, Gtrid: []byte{0xab, 0x01}}))

	for _, bad := range []string{"", "TX:1:2", "XID:1:ab:01", "XID:x:ab:01:q", "XID:1:zz:01:q", "XID:1::01:q",
		"XID:1:ab:0:q", "XID:1:ab:01:", "XID:1:ab:01:a b", "XID:-1:ab:01:q"} {
		_, _, err := txn.ParseKey(bad)
		require.ErrorIs(t, err, txn.ErrInvalid, bad)
	}
	for _, q := range []string{"", "a:b", "a b", "a\n"} {
		_, err := x.Key(q)
		require.ErrorIs(t, err, txn.ErrInvalid, q)
	}
}

func TestGlobalXIDOwner(t *testing.T) {
	t.Parallel()
	long := "o123456789o123456789o123456789o12345678"
	require.Len(t, long, txn.MaxOwnerLen)
	for _, owner := range []string{"a", "app-1.host_2", long} {
		x, err := txn.NewGlobalXID(owner)
		require.NoError(t, err)
		require.NoError(t, x.Validate())
		require.LessOrEqual(t, len(x.Gtrid), txn.MaxGtridSize)
		o, ok := x.Owner()
		require.True(t, ok)
		require.Equal(t, owner, o)
		b := x.Branch([]byte("2"))
		o, ok = b.Owner()
		require.True(t, ok, "a branch names the owner too")
		require.Equal(t, owner, o)
		require.True(t, b.SameGlobal(x))
		require.True(t, b.Global().Equal(x))
	}
	for _, bad := range []string{"", long + "x", "a b", "a:b", "ü"} {
		_, err := txn.NewGlobalXID(bad)
		require.ErrorIs(t, err, txn.ErrInvalid, bad)
	}
	for _, foreign := range []txn.XID{
		{FormatID: 1, Gtrid: []byte("app.0123456789abcdef01234567")},
		{FormatID: txn.FormatID, Gtrid: []byte("short")},
		{FormatID: txn.FormatID, Gtrid: []byte("app_0123456789abcdef01234567")},
		{FormatID: txn.FormatID, Gtrid: []byte("app.0123456789abcdef0123456z")},
	} {
		_, ok := foreign.Owner()
		require.False(t, ok, "%s", foreign)
	}
}
