package adapter

import "sync"

// Recent is a bounded set of the last keys added (a platform's event ids, the messages a bot
// handled): a platform's redelivery within that many is found in memory. It is per process, safe
// for concurrent use; the zero value is not usable: [NewRecent].
type Recent struct {
	mu   sync.Mutex
	keys map[string]struct{}
	ring []string
	next int
}

// NewRecent returns a set keeping the last n keys.
func NewRecent(n int) *Recent {
	return &Recent{keys: make(map[string]struct{}, n), ring: make([]string, max(n, 1))}
}

// Has reports whether key is among the last keys added.
func (r *Recent) Has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[key]
	return ok
}

// Add adds key, forgetting the oldest when the set is full.
func (r *Recent) Add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[key]; ok {
		return
	}
	delete(r.keys, r.ring[r.next])
	r.ring[r.next] = key
	r.keys[key] = struct{}{}
	r.next = (r.next + 1) % len(r.ring)
}
