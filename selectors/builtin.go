package selectors

import (
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/sdk/selector"
)

// The builtin selector names Open accepts: sdk/selector's builtins.
const (
	// NameRoundRobin cycles through the partitions (selector.RoundRobin);
	// the default.
	NameRoundRobin = "roundrobin"
	// NameRandom picks uniformly at random (selector.Random).
	NameRandom = "random"
	// NameHash sends equal keys to the same partition (selector.HashByKey);
	// messages without a key go round robin.
	NameHash = "hash"
	// NameFixed always picks the partition index given as
	// Config["partition"] (selector.Fixed).
	NameFixed = "fixed"
)

// Builtins lists the builtin selector names.
var Builtins = []string{NameRoundRobin, NameRandom, NameHash, NameFixed}

// newBuiltin returns the builtin selector name configured by cfg.
func newBuiltin(name string, cfg map[string]string) (Selector, error) {
	allowed := map[string]bool{}
	var s selector.Selector
	switch name {
	case "", NameRoundRobin:
		s = selector.RoundRobin()
	case NameRandom:
		s = selector.Random()
	case NameHash:
		s = selector.HashByKey()
	case NameFixed:
		allowed["partition"] = true
		v, ok := cfg["partition"]
		if !ok {
			return nil, fmt.Errorf("%w: fixed selector needs config partition", ErrBadConfig)
		}
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("%w: fixed selector: partition %q is not a non-negative integer", ErrBadConfig, v)
		}
		s = selector.Fixed(p)
	default:
		return nil, fmt.Errorf("%w: %q (builtins: %v)", ErrUnknownSelector, name, Builtins)
	}
	for k := range cfg {
		if !allowed[k] {
			return nil, fmt.Errorf("%w: selector %s has no config key %q", ErrBadConfig, name, k)
		}
	}
	return nopCloser{s}, nil
}

// nopCloser is a builtin: Close does nothing.
type nopCloser struct{ selector.Selector }

func (nopCloser) Close() error { return nil }
