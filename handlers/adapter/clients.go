package adapter

import (
	"errors"
	"sync"
	"time"
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
	users   map[string]*users // keys made by Acquire: who uses the client, its linger
}

// users counts the Acquires of one key not released yet; linger closes its client once none are.
type users struct {
	n      int
	linger *time.Timer
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

// Acquire is [Clients.Get] for a client that lives only while it is used (a connection an
// account may hold in one process at a time): every Acquire is matched by one call of its
// release, and linger after the last release the client is closed (when it has a Close() error
// method) and forgotten, unless it was acquired again meanwhile. A key is either Acquired or
// got with Get, never both.
func (cs *Clients[C]) Acquire(key string, linger time.Duration, create func() C) (C, func()) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.clients[key]
	if !ok {
		c = create()
		if cs.clients == nil {
			cs.clients = map[string]C{}
		}
		cs.clients[key] = c
	}
	if cs.users == nil {
		cs.users = map[string]*users{}
	}
	u := cs.users[key]
	if u == nil {
		u = &users{}
		cs.users[key] = u
	}
	if u.linger != nil {
		u.linger.Stop()
		u.linger = nil
	}
	u.n++
	var once sync.Once
	return c, func() { once.Do(func() { cs.release(key, u, linger) }) }
}

// release ends one use of key's client, closing it linger after the last.
func (cs *Clients[C]) release(key string, u *users, linger time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if u.n--; u.n > 0 || cs.users[key] != u {
		return
	}
	u.linger = time.AfterFunc(linger, func() {
		cs.mu.Lock()
		c, ok := cs.clients[key]
		if u.n > 0 || cs.users[key] != u || !ok {
			cs.mu.Unlock()
			return
		}
		delete(cs.clients, key)
		delete(cs.users, key)
		cs.mu.Unlock()
		if cl, ok := any(c).(interface{ Close() error }); ok {
			_ = cl.Close()
		}
	})
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
	for _, u := range cs.users {
		if u.linger != nil {
			u.linger.Stop()
		}
	}
	cs.users = nil
	cs.mu.Unlock()
	var errs []error
	for _, c := range clients {
		if cl, ok := any(c).(interface{ Close() error }); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}
