// Package fixed is the builtin fixed selector: every message goes to one
// configured partition index.
package fixed

import (
	"context"
	"fmt"

	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/internal/builtin"
)

// Selector always chooses one index into the partition list. It is safe
// for concurrent use.
type Selector struct{ index int }

var _ selectors.Selector = Selector{}

// New returns a selector that always chooses index; it fails with
// selectors.ErrBadConfig when index is negative.
func New(index int) (Selector, error) {
	if index < 0 {
		return Selector{}, fmt.Errorf("%w: fixed partition index %d is negative", selectors.ErrBadConfig, index)
	}
	return Selector{index: index}, nil
}

// Select chooses the fixed index for every message; it fails with
// selectors.ErrBadChoice when the topic has too few partitions.
func (s Selector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if err := builtin.Check(ctx, req.Topic, len(req.Partitions)); err != nil {
		return nil, err
	}
	if s.index >= len(req.Partitions) {
		return nil, fmt.Errorf("%w: fixed partition index %d, topic %q has %d partitions",
			selectors.ErrBadChoice, s.index, req.Topic, len(req.Partitions))
	}
	out := make([]int, len(req.Messages))
	for i := range out {
		out[i] = s.index
	}
	return &selectors.SelectResponse{Choices: out}, nil
}

// Close does nothing.
func (Selector) Close() error { return nil }
