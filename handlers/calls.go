package handlers

import (
	"context"
	"sync"
)

// calls is what this process knows of its own final deliveries that the message records do not
// say yet: a target call under way, a refusal whose intent could not be released, a final shown
// whose completion is not recorded. With it, a NATS write that timed out (but was stored), a
// leader change or a redelivery to the same process never turns a final into doubt: only a
// process that died between intent and outcome leaves one (its records name it, and no live
// process knows more).
type calls struct {
	mu sync.Mutex
	m  map[string]call
}

type call struct {
	state callState
	done  Record // callShown: the completed record to store
	rev   uint64 // callShown: the intent's revision
}

type callState int

const (
	callStarted callState = iota + 1
	callRefused
	callShown
)

// maxRefusals bounds the refusals remembered; past it they are forgotten (their finals are then
// in doubt, the safe side).
const maxRefusals = 10000

func newCalls() *calls { return &calls{m: map[string]call{}} }

func (c *calls) set(key string, v call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v.state == callRefused && len(c.m) >= maxRefusals {
		for k, x := range c.m {
			if x.state == callRefused {
				delete(c.m, k)
			}
		}
	}
	c.m[key] = v
}

// start notes that the target is about to be called for key's final.
func (c *calls) start(key string) { c.set(key, call{state: callStarted}) }

// refused notes that the target refused key's final and its intent stayed in the record.
func (c *calls) refused(key string) { c.set(key, call{state: callRefused}) }

// shown notes that key's final is shown and done is to be stored over the intent at rev.
func (c *calls) shown(key string, done Record, rev uint64) {
	c.set(key, call{state: callShown, done: done, rev: rev})
}

// forget drops what is known of key (its record says it all).
func (c *calls) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// untouched reports whether this process never showed key's final: no call, or a refused one.
func (c *calls) untouched(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return !ok || v.state == callRefused
}

// shownRecord is the completed record of a final this process showed and has not recorded yet.
func (c *calls) shownRecord(key string) (Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v.done, ok && v.state == callShown
}

// saveDone stores the completed record of key's shown final, if one is waiting.
func (c *calls) saveDone(ctx context.Context, d *Deliverer, key string) error {
	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	if !ok || v.state != callShown {
		return nil
	}
	if err := d.complete(ctx, key, v.done, v.rev); err != nil {
		return err
	}
	c.mu.Lock()
	if cur, ok := c.m[key]; ok && cur.state == callShown {
		delete(c.m, key)
	}
	c.mu.Unlock()
	return nil
}
