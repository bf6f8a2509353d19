package adaptertest

import (
	"sync"

	"github.com/ximd/ximd/handlers/adapter"
)

// Fallbacks records the render fall-backs an adapter counts (its adapter.Common.Renders), each
// as "adapter/reason", for a test to read back. The zero value is ready; it is safe for
// concurrent use.
type Fallbacks struct {
	mu      sync.Mutex
	reasons []string
}

var _ adapter.RenderFallbacks = (*Fallbacks)(nil)

// Fallback records one fall-back of the adapter for the reason.
func (f *Fallbacks) Fallback(adapterName, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reasons = append(f.reasons, adapterName+"/"+reason)
}

// All is every fall-back recorded, "adapter/reason", in the order counted.
func (f *Fallbacks) All() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reasons...)
}

// Count is how many times each "adapter/reason" was recorded (empty: none).
func (f *Fallbacks) Count() map[string]int {
	out := map[string]int{}
	for _, r := range f.All() {
		out[r]++
	}
	return out
}
