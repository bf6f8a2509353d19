package fakekit

import (
	"sync/atomic"
	"time"
)

// Clock is a fake's clock: time.Now unless Set replaced it. The zero Clock is ready; its
// methods are safe for concurrent use.
type Clock struct {
	now atomic.Pointer[func() time.Time]
}

// Now is the time on the clock.
func (c *Clock) Now() time.Time {
	if f := c.now.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// Set replaces the clock; nil restores time.Now.
func (c *Clock) Set(now func() time.Time) {
	if now == nil {
		c.now.Store(nil)
		return
	}
	c.now.Store(&now)
}
