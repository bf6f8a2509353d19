package adapter

import (
	"context"
	"errors"
)

// Relay runs an account's calls in the one process that holds the account's connection, for a
// platform whose account takes one connection at a time (WeCom's long connection: a second
// subscribe drops the first, and every send goes on the subscribed connection). The poll loop
// of the account's poll key holds it (Hold, for as long as the loop runs); a target anywhere
// calls through Call, which runs the call in this process when it holds the key and else asks
// the process that does. The node's Relay goes over core NATS (pipeline/relay); with none in
// [Common] an adapter keeps its connection in the process that uses it.
type Relay interface {
	// Hold serves key's calls with serve until release is called. A call runs on its own
	// goroutine, with the caller's deadline; serve's error reaches the caller with its ack
	// code, its retry-after and whether the outcome is in doubt ([RetryAfterError],
	// [AmbiguousError]).
	Hold(key string, serve RelayFunc) (release func())
	// Call runs req where key is held and returns what serve returned. No process holding key
	// is an error that [errors.Is] [ErrNotHeld] (target_unavailable, retryable, certain: nothing
	// ran); no answer before ctx ends is an [AmbiguousError].
	Call(ctx context.Context, key string, req []byte) ([]byte, error)
}

// RelayFunc serves one relayed call.
type RelayFunc func(ctx context.Context, req []byte) ([]byte, error)

// ErrNotHeld: no process holds the account's connection (its poll loop is not running yet, or
// is moving to another worker).
var ErrNotHeld = errors.New("no process holds the account's connection")
