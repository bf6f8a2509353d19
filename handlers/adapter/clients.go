package adapter

import (
	"errors"
	"sync"
)

// Clients is the per-account client cache of a platform adapter: one client per account (a bot,
// an app, a homeserver login), shared by every channel bound through that account, so their
// calls share its token, its connection pool and its rate-limit pauses. The zero value is an
// empty cache; it is safe for concurrent use.
//
// A key names an account and is kept in memory only, but it is still never a secret: an
// adapter keys by a digest of the credentials (with the API's address), never by a token.
type Clients[C any] struct {
	mu      sync.Mutex
	clients map[string]C
}

// Get returns the client of key's account, made by create under the cache's lock the first
// time the key is asked for (so two channels of one account never make two clients).
func (cs *Clients[C]) Get(key string, create func() C) C {
	c, _ := cs.TryGet(key, func() (C, error) { return create(), nil })
	return c
}

// TryGet is [Clients.Get] for a client whose making can fail: an error from create is
// returned, and nothing is cached, so the next call tries again.
func (cs *Clients[C]) TryGet(key string, create func() (C, error)) (C, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c, ok := cs.clients[key]; ok {
		return c, nil
	}
	c, err := create()
	if err != nil {
		var zero C
		return zero, err
	}
	if cs.clients == nil {
		cs.clients = map[string]C{}
	}
	cs.clients[key] = c
	return c, nil
}

// Len is the number of accounts with a client.
func (cs *Clients[C]) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.clients)
}

// Close ends the cache's clients: each that has a Close() error method is closed, and every
// client is forgotten, so a later Get makes a new one. Targets opened before keep the client
// they hold. The errors of the clients' Close are joined.
func (cs *Clients[C]) Close() error {
	cs.mu.Lock()
	clients := cs.clients
	cs.clients = nil
	cs.mu.Unlock()
	var errs []error
	for _, c := range clients {
		if cl, ok := any(c).(interface{ Close() error }); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}
