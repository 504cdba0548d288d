// Package random is the builtin random selector: each message goes to a
// partition chosen uniformly at random.
package random

import (
	"context"

	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/internal/builtin"
)

// Selector is a random selector. It is safe for concurrent use; the zero
// value is ready.
type Selector struct{}

var _ selectors.Selector = Selector{}

// New returns a random selector.
func New() Selector { return Selector{} }

// Select picks a random partition for each message.
func (Selector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if err := builtin.Check(ctx, req.Topic, len(req.Partitions)); err != nil {
		return nil, err
	}
	out := make([]int, len(req.Messages))
	builtin.Random(out, len(req.Partitions))
	return &selectors.SelectResponse{Choices: out}, nil
}

// Close does nothing.
func (Selector) Close() error { return nil }
