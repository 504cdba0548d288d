package selectors

import (
	"context"
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/selectors/internal/builtin"
)

// The builtin selector names Open accepts (the same selectors as the
// roundrobin, random, hash and fixed packages).
const (
	// NameRoundRobin cycles through the partitions; the default.
	NameRoundRobin = "roundrobin"
	// NameRandom picks uniformly at random.
	NameRandom = "random"
	// NameHash sends equal keys to the same partition (FNV-1a of the key);
	// messages without a key go round robin.
	NameHash = "hash"
	// NameFixed always picks the partition given as Config["partition"].
	NameFixed = "fixed"
)

// Builtins lists the builtin selector names.
var Builtins = []string{NameRoundRobin, NameRandom, NameHash, NameFixed}

// newBuiltin returns the builtin selector name configured by cfg.
func newBuiltin(name string, cfg map[string]string) (Selector, error) {
	allowed := map[string]bool{}
	var s Selector
	switch name {
	case "", NameRoundRobin:
		s = &roundRobin{}
	case NameRandom:
		s = randomSelector{}
	case NameHash:
		s = &hashSelector{}
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
		s = fixedSelector(p)
	default:
		return nil, fmt.Errorf("%w: %q (builtins: %v)", ErrUnknownSelector, name, Builtins)
	}
	for k := range cfg {
		if !allowed[k] {
			return nil, fmt.Errorf("%w: selector %s has no config key %q", ErrBadConfig, name, k)
		}
	}
	return s, nil
}

// prepare checks req for a builtin and returns a choices slice to fill.
func prepare(ctx context.Context, req *SelectRequest) ([]int, error) {
	if err := builtin.Check(ctx, req.Topic, len(req.Partitions)); err != nil {
		return nil, err
	}
	return make([]int, len(req.Messages)), nil
}

type roundRobin struct{ rr builtin.RoundRobin }

func (s *roundRobin) Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	out, err := prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	s.rr.Choose(out, len(req.Partitions))
	return &SelectResponse{Choices: out}, nil
}

func (s *roundRobin) Close() error { return nil }

type randomSelector struct{}

func (randomSelector) Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	out, err := prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	builtin.Random(out, len(req.Partitions))
	return &SelectResponse{Choices: out}, nil
}

func (randomSelector) Close() error { return nil }

type hashSelector struct{ h builtin.Hash }

func (s *hashSelector) Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	out, err := prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	s.h.Choose(out, len(req.Partitions), func(i int) []byte { return req.Messages[i].Key })
	return &SelectResponse{Choices: out}, nil
}

func (s *hashSelector) Close() error { return nil }

type fixedSelector int

func (f fixedSelector) Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	out, err := prepare(ctx, req)
	if err != nil {
		return nil, err
	}
	if int(f) >= len(req.Partitions) {
		return nil, fmt.Errorf("%w: fixed partition index %d, topic %q has %d partitions", ErrBadChoice, int(f), req.Topic, len(req.Partitions))
	}
	for i := range out {
		out[i] = int(f)
	}
	return &SelectResponse{Choices: out}, nil
}

func (fixedSelector) Close() error { return nil }
