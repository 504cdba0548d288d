package filterset

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestBatchLayout: a reply of the kept records stays within maxSize plus
// one offset prefix (its first record always goes), and announces the
// first kept record left out, else the batch's next.
func TestBatchLayout(t *testing.T) {
	const size = 100
	rec := 8 + message.HeaderSize + size // a kept record in the reply
	var recs []filters.Record
	for i := range 4 {
		recs = append(recs, filters.Record{Offset: int64(i * (message.HeaderSize + size)), Size: size})
	}
	b := &Batch{Recs: recs, Keep: []bool{true, false, true, true}, Next: 999}

	total, end, next := b.Layout(10 * rec)
	require.Equal(t, []any{3 * rec, 4, int64(999)}, []any{total, end, next})

	total, end, next = b.Layout(2*rec - 8)
	require.Equal(t, []any{2 * rec, 3, recs[3].Offset}, []any{total, end, next})

	total, end, next = b.Layout(1)
	require.Equal(t, []any{rec, 2, recs[2].Offset}, []any{total, end, next}, "the first kept record goes even over maxSize")

	b.Keep = []bool{false, false, false, false}
	total, _, next = b.Layout(10 * rec)
	require.Equal(t, []any{0, int64(999)}, []any{total, next}, "nothing kept: a 301 to next")
}
