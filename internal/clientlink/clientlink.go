// Package clientlink (not API) gives sdk/admin what it shares with
// sdk/client without widening the Client's exported surface: a Client's
// broker connections (with its TLS, SASL and timeouts), its direct broker
// list and its ZooKeeper session. sdk/client fills Hooks in an init
// function; sdk/admin calls them with the *client.Client it built.
package clientlink

import (
	"context"
	"time"

	"github.com/metaq-go/metaq/sdk/cluster"
)

// Conn is one broker connection made with a Client's options. It redials
// after a failure and is safe for concurrent use.
type Conn interface {
	// RoundTrip sends one request and returns a copy of the body of its
	// 200 reply; another code is a *client.BrokerError. ctx without a
	// deadline is bounded by the Client's RequestTimeout.
	RoundTrip(ctx context.Context, encode func(dst []byte, opaque int32) []byte) ([]byte, error)
	// Close closes the connection. It is idempotent.
	Close()
}

// Hooks are the functions sdk/client provides. Each takes a *client.Client
// as cl.
type Hooks struct {
	// Dial returns a connection to the broker at addr (made lazily).
	Dial func(cl any, addr string) Conn
	// Brokers returns the addresses given with client.Brokers (nil in
	// ZooKeeper mode).
	Brokers func(cl any) []string
	// ZooKeeper returns the ZooKeeper session (nil in direct mode) and
	// whether broker connections use TLS (so the brokers' TLS addresses
	// are the ones to dial).
	ZooKeeper func(cl any) (zk *cluster.Cluster, useTLS bool)
	// OnlyConnecting returns an error naming the producing and consuming
	// options given, which an Admin does not take.
	OnlyConnecting func(cl any) error
	// RequestTimeout is the Client's RequestTimeout.
	RequestTimeout func(cl any) time.Duration
}

// H is set by sdk/client's init.
var H Hooks
