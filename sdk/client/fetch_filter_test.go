package client

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// TestConsumerFilteredReplies: the broker runs the gets of a consumer group
// through the group's server-side filter (the builtin "attribute" filter,
// keeping attribute "keep": every fifth message) and answers fvalue with
// the kept records, each with its own offset, and the next offset past
// the skipped ones, or 301 when it kept none.
func TestConsumerFilteredReplies(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Edit(func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t", Filters: []conf.TopicFilter{{
			Group: defaultGroup, Filter: "attribute", Config: map[string]string{"equals": "keep"}}}}}
	}))
	p, err := newBrokerProducer(b.Addr(), quiet, withSelector(selector.Fixed(0)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(ctxT(t, 10*time.Second)) })
	var offs []int64
	for i := range 200 {
		m := &message.Message{Topic: "t", Body: padded(i, 30), Attribute: "drop", HasAttribute: true}
		if i%5 == 0 {
			m.Attribute = "keep"
		}
		r, err := p.Send(ctxT(t, 10*time.Second), m)
		require.NoError(t, err)
		offs = append(offs, r.Offset)
	}
	end := offs[199] + int64(message.HeaderSize+4+len("drop")+len(padded(199, 30)))

	c := consumerAt(t, b.Addr(), withMaxFetchSize(300))
	got := collect(t, c, 40)
	for i, m := range got {
		require.Equal(t, strconv.Itoa(i*5), string(trimZeros(m.Body)))
		require.Equal(t, "keep", m.Attribute)
		require.Equal(t, offs[i*5], m.Offset, "each message carries its own offset")
	}
	require.Equal(t, offs[196], c.Position(0))
	// Reading on: nothing more is delivered, and the position moves past the
	// records the filter skipped (a 301), to the end.
	for m, err := range c.Messages(ctxT(t, time.Second)) {
		require.NoError(t, err)
		t.Fatalf("unexpected message %q at %d", m.Body, m.Offset)
	}
	require.Equal(t, end, c.Position(0))
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
