// Package selectors is the partition-selector plugin kind. Its contract is
// sdk/selector's: a selector.Selector chooses, for a message, an index into
// the topic's partition list (broker id, partition number), the same
// contract the SDK's client.Selector takes.
//
// A selector runs in process (sdk/selector's builtins, or any Go type
// implementing selector.Selector) or out of process as a plugin binary
// whose main is one line, selectors.Serve(impl). Open returns either,
// by name or by binary, as a Selector:
//
//	sel, err := selectors.Open(ctx, selectors.OpenOptions{Plugin: &selectors.Plugin{Path: bin}})
//	cl, err := client.New(client.Brokers(addr), client.Selector(sel))
//
// A plugin selector sees what a selector needs of a message: its topic,
// key and attribute, never its body.
//
// When a plugin selector is down, times out or answers badly, the selector
// Open returned falls back to round robin for that message (the kind's
// failure policy): sending never fails because a plugin did. Only the
// caller's own ctx ending makes Select fail.
package selectors

import "github.com/metaq-go/metaq/sdk/selector"

// Selector is what Open returns: a selector.Selector that holds resources.
// Close releases them (for a plugin selector opened with a private
// supervisor, the plugin process); it is idempotent, and Select after
// Close fails with ErrClosed.
type Selector interface {
	selector.Selector
	Close() error
}
