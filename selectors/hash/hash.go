// Package hash is the builtin hash-by-key selector: a message with a key
// goes to partition FNV-1a(key) modulo the partition count, so messages
// with the same key land on the same partition (and keep their order) as
// long as the partition list does not change. Messages without a key are
// spread round robin. It chooses as the SDK's client.HashByKey does.
package hash

import (
	"context"

	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/internal/builtin"
)

// Selector is a hash-by-key selector. It is safe for concurrent use; the
// zero value is ready.
type Selector struct{ h builtin.Hash }

var _ selectors.Selector = (*Selector)(nil)

// New returns a hash-by-key selector.
func New() *Selector { return &Selector{} }

// Select hashes each message's key.
func (s *Selector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if err := builtin.Check(ctx, req.Topic, len(req.Partitions)); err != nil {
		return nil, err
	}
	out := make([]int, len(req.Messages))
	s.h.Choose(out, len(req.Partitions), func(i int) []byte { return req.Messages[i].Key })
	return &selectors.SelectResponse{Choices: out}, nil
}

// Close does nothing.
func (s *Selector) Close() error { return nil }
