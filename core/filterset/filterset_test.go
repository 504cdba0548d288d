package filterset

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
)

func filterConfig(t *testing.T, fs ...conf.TopicFilter) *conf.Config {
	t.Helper()
	cfg := conf.Default()
	cfg.DataDir = t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "t", Filters: fs}, {Name: "plain"}}
	return cfg
}

// TestOpenLookupClose: a builtin filter is found by topic and group (and
// nothing else is), without allocating; Close empties the set.
func TestOpenLookupClose(t *testing.T) {
	cfg := filterConfig(t, conf.TopicFilter{Group: "g", Filter: expr.Name, Config: map[string]string{"expr": `attribute == "a"`}})
	sup := host.NewSupervisor(host.Options{})
	defer sup.Close()
	s, err := Open(cfg, sup, t.Logf)
	require.NoError(t, err)
	require.Equal(t, 1, s.Len())
	in := s.Lookup("t", []byte("g"))
	require.NotNil(t, in)
	require.Equal(t, expr.Name, in.Name())
	require.Nil(t, s.Lookup("t", []byte("other")))
	require.Nil(t, s.Lookup("plain", []byte("g")))
	group := []byte("g")
	require.Zero(t, testing.AllocsPerRun(100, func() { s.Lookup("t", group) }))
	require.NoError(t, s.Close())
	require.Nil(t, s.Lookup("t", []byte("g")))
	var none *Set
	require.Nil(t, none.Lookup("t", []byte("g")))
	require.NoError(t, none.Close())
}

func TestOpenAndCheckRefusals(t *testing.T) {
	t.Parallel()
	sup := host.NewSupervisor(host.Options{})
	defer sup.Close()
	_, err := Open(filterConfig(t, conf.TopicFilter{Group: "g", Filter: "nosuch"}), sup, t.Logf)
	require.ErrorIs(t, err, filters.ErrUnknownFilter)
	require.Contains(t, err.Error(), "topic t group g: ")

	bad := filterConfig(t, conf.TopicFilter{Group: "g", Filter: expr.Name, Config: map[string]string{"expr": "(("}})
	probs := Check(bad)
	require.Len(t, probs, 1)
	require.Contains(t, probs[0], "topic t group g: filter expr: ")
	require.Empty(t, Check(filterConfig(t, conf.TopicFilter{Group: "g", Filter: "a-plugin"})), "plugins are not started")
}

// TestScanRecords: whole records are listed with their offsets, attributes
// and (when asked) bodies; a partial record at the end is left out.
func TestScanRecords(t *testing.T) {
	t.Parallel()
	m := message.Message{Attribute: "a", HasAttribute: true, Body: []byte("body")}
	var buf []byte
	buf = message.AppendRecord(buf, 11, message.FlagHasAttribute, m.AppendData(nil))
	first := len(buf)
	buf = message.AppendRecord(buf, 12, 0, []byte("plain"))
	whole := len(buf)
	buf = message.AppendRecord(buf, 13, 0, []byte("cut"))[:len(buf)+5]

	recs, next := ScanRecords(nil, buf, 100, true)
	require.Len(t, recs, 2)
	require.Equal(t, int64(100+whole), next)
	require.Equal(t, int64(100), recs[0].Offset)
	require.Equal(t, int64(11), recs[0].MsgID)
	require.True(t, recs[0].HasAttribute)
	require.Equal(t, "a", recs[0].Attribute)
	require.Equal(t, "body", string(recs[0].Body))
	require.Equal(t, int64(100+first), recs[1].Offset)
	require.False(t, recs[1].HasAttribute)
	require.Equal(t, "plain", string(recs[1].Body))

	recs, _ = ScanRecords(recs[:0], buf, 100, false)
	require.Nil(t, recs[0].Body)
	a, has, _, _ := splitAttr(message.FlagHasAttribute, []byte{0, 0, 0, 9, 'x'})
	require.False(t, has, "a malformed attribute reads as none")
	require.Nil(t, a)
}

// TestScanRecordsProperties: a filter sees a record's attribute as before
// and, as its body, the payload after the properties block (flag bit 1).
func TestScanRecordsProperties(t *testing.T) {
	t.Parallel()
	for _, m := range []message.Message{
		{Attribute: "a", HasAttribute: true, Body: []byte("body"), Key: []byte("k"), Headers: message.Headers{{Key: "h", Value: []byte("v")}}},
		{Body: []byte("body"), Tags: []string{"TagA"}},
	} {
		buf := message.AppendRecord(nil, 11, m.Flag(), m.AppendData(nil))
		recs, _ := ScanRecords(nil, buf, 0, true)
		require.Len(t, recs, 1)
		require.Equal(t, m.HasAttribute, recs[0].HasAttribute)
		require.Equal(t, m.Attribute, recs[0].Attribute)
		require.Equal(t, "body", string(recs[0].Body))
		require.Equal(t, m.DataLen(), recs[0].Size)
		var got message.Message
		require.NoError(t, message.DecodeProperties(recs[0].Properties, &got), "Properties is the block after its length prefix")
		require.Equal(t, m.Key, got.Key)
		require.Equal(t, m.Tags, got.Tags)
		require.Equal(t, m.Headers, got.Headers)
	}
	recs, _ := ScanRecords(nil, message.AppendRecord(nil, 1, 0, []byte("plain")), 0, false)
	require.Nil(t, recs[0].Properties, "no properties block")
}
