package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/metaq-go/metaq/plugins"
)

// Reinit is the remote side of a plugin kind whose instance takes an Init
// with its config (offset stores, XA coordinators). Each call takes the
// supervised process's current client; after a restart (a new
// generation) the config last given to Init is sent again first.
type Reinit[C any] struct {
	// P gives the current process's client and generation (a *Plugin;
	// a seam for tests).
	P interface {
		Client() (any, uint64, error)
	}
	// What names the kind in errors ("offsetstore plugin").
	What string
	// Send sends Init with config to c.
	Send func(ctx context.Context, c C, config map[string]string) error

	mu      sync.Mutex // serialises re-Init
	config  map[string]string
	inited  uint64 // generation Init last succeeded on (0: none)
	hasInit bool   // Init was asked for at least once
}

// client returns the current process's client and its generation.
func (r *Reinit[C]) client() (C, uint64, error) {
	var zero C
	raw, gen, err := r.P.Client()
	if err != nil {
		return zero, 0, fmt.Errorf("%s: %w", r.What, err)
	}
	c, ok := raw.(C)
	if !ok {
		return zero, 0, fmt.Errorf("%s: %w", r.What, plugins.ErrWrongKind)
	}
	return c, gen, nil
}

// Current returns the current process's client, re-sending Init first
// when the process is new since the last Init.
func (r *Reinit[C]) Current(ctx context.Context) (C, error) {
	c, gen, err := r.client()
	if err != nil {
		return c, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hasInit && r.inited != gen {
		if err := r.Send(ctx, c, r.config); err != nil {
			var zero C
			return zero, fmt.Errorf("%s: re-init after restart: %w", r.What, err)
		}
		r.inited = gen
	}
	return c, nil
}

// Init sends Init with config to the current process and keeps config
// for the processes after it.
func (r *Reinit[C]) Init(ctx context.Context, config map[string]string) error {
	c, gen, err := r.client()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.config = config
	r.hasInit = true
	if err := r.Send(ctx, c, config); err != nil {
		r.inited = 0
		return err
	}
	r.inited = gen
	return nil
}
