package fakekit

import "slices"

// Calls is the log of the calls a fake received, in order of arrival, each a platform's own
// Call type C. The zero Calls is ready.
type Calls[C any] struct {
	log []C
}

// Add records a call on arrival and returns its index for At.
func (l *Calls[C]) Add(c C) int {
	l.log = append(l.log, c)
	return len(l.log) - 1
}

// At is the record of call i, to be completed (its status, its early flag) while the call is
// served.
func (l *Calls[C]) At(i int) *C { return &l.log[i] }

// All returns a copy of the log.
func (l *Calls[C]) All() []C { return slices.Clone(l.log) }

// Count counts the calls for which is reports true, such as those made early.
func (l *Calls[C]) Count(is func(C) bool) int {
	n := 0
	for _, c := range l.log {
		if is(c) {
			n++
		}
	}
	return n
}
