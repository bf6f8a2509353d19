package target_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/ximd/ximd/handlers/target"
)

type namedAdapter string

func (a namedAdapter) Name() string                                    { return string(a) }
func (namedAdapter) Open(json.RawMessage) (target.Target, error)       { return nil, nil }
func (namedAdapter) Public(c json.RawMessage) (json.RawMessage, error) { return c, nil }

func TestRegistry_LookupAndNames(t *testing.T) {
	r := target.NewRegistry(namedAdapter("webhook"), namedAdapter("webchat"))

	for _, name := range []string{"webhook", "webchat"} {
		a, ok := r.Lookup(name)
		if !ok || a.Name() != name {
			t.Errorf("Lookup(%q) = %v, %v; want the %q adapter", name, a, ok, name)
		}
	}
	if a, ok := r.Lookup("slack"); ok {
		t.Errorf("Lookup(slack) = %v, true; want not found", a)
	}
	names := r.Names()
	if want := []string{"webchat", "webhook"}; !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v (sorted)", names, want)
	}
	names[0] = "changed"
	if r.Names()[0] != "webchat" {
		t.Error("Names() returned the registry's own slice; want a copy")
	}
}

func TestNewRegistry_PanicsOnBadWiring(t *testing.T) {
	tests := []struct {
		name     string
		adapters []target.Adapter
	}{
		{name: "duplicate", adapters: []target.Adapter{namedAdapter("webhook"), namedAdapter("webhook")}},
		{name: "empty name", adapters: []target.Adapter{namedAdapter("")}},
		{name: "nil adapter", adapters: []target.Adapter{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("NewRegistry did not panic")
				}
			}()
			target.NewRegistry(tt.adapters...)
		})
	}
}

func TestNewRegistry_Empty(t *testing.T) {
	r := target.NewRegistry()
	if _, ok := r.Lookup("webhook"); ok {
		t.Error("empty registry found an adapter")
	}
	if n := r.Names(); len(n) != 0 {
		t.Errorf("Names() = %v, want none", n)
	}
}
