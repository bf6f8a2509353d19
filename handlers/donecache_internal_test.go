package handlers

import (
	"reflect"
	"testing"

	"github.com/ximd/ximd/profile"
)

// A completed message is answered from the cache as from its record: the accepted packet's
// redelivery `accepted`, any other packet `duplicate`, other text `message_id_conflict`.
func TestDoneCache_Answers(t *testing.T) {
	c := newDoneCache(10)
	k := bufKey{"ch1", "m1"}
	if _, ok := c.get(k); ok {
		t.Fatal("empty cache found a message")
	}
	c.put(k, Record{State: StateDone, Digest: "d1", PacketID: "pkt_1", Seq: 7})
	m, ok := c.get(k)
	if !ok {
		t.Fatal("completed message not found")
	}
	for _, tc := range []struct {
		packetID string
		seq      uint64
		digest   string
		status   string
		code     string
	}{
		{"pkt_1", 7, "d1", profile.AckAccepted, ""},
		{"pkt_1", 8, "d1", profile.AckDuplicate, ""}, // the same frame sent again: a new transmission
		{"pkt_2", 9, "d1", profile.AckDuplicate, ""},
		{"pkt_2", 9, "d2", profile.AckRejected, profile.CodeMessageIDConflict},
	} {
		ack := m.answer(tc.packetID, tc.seq, "m1", tc.digest)
		if ack.Status != tc.status || ack.Code != tc.code {
			t.Errorf("%s seq %d digest %s: answered %s %s, want %s %s", tc.packetID, tc.seq, tc.digest, ack.Status, ack.Code, tc.status, tc.code)
		}
	}
	// A record without a sequence (written before sequences were kept) accepts its packet_id.
	if ack := markOf("ch1", Record{Digest: "d1", PacketID: "pkt_1"}).answer("pkt_1", 99, "m1", "d1"); ack.Status != profile.AckAccepted {
		t.Errorf("record without sequence: answered %s", ack.Status)
	}
	for _, other := range []bufKey{{"ch1", "m2"}, {"ch2", "m1"}, {"ch1m", "1"}, {"ch", "1m1"}} {
		if _, ok := c.get(other); ok {
			t.Errorf("%v found: it was never completed", other)
		}
	}
}

// The cache keeps the last max messages, forgets a channel's on dropChannel, and holds no
// pointer (the garbage collector never scans it).
func TestDoneCache_BoundedAndDropsChannel(t *testing.T) {
	c := newDoneCache(3)
	for _, k := range []bufKey{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"b", "2"}} {
		c.put(k, Record{Digest: "d", PacketID: "p"})
	}
	if _, ok := c.get(bufKey{"a", "1"}); ok || c.len() != 3 {
		t.Fatalf("after 4 puts into 3 slots: oldest found %v, %d held", ok, c.len())
	}
	c.put(bufKey{"a", "2"}, Record{Digest: "d", PacketID: "p2"}) // an update takes no slot
	if m, _ := c.get(bufKey{"a", "2"}); m.answer("p2", 0, "2", "d").Status != profile.AckAccepted || c.len() != 3 {
		t.Fatalf("update not kept, or it took a slot (%d held)", c.len())
	}
	c.dropChannel("a")
	if _, ok := c.get(bufKey{"a", "2"}); ok {
		t.Fatal("dropped channel's message still found")
	}
	if _, ok := c.get(bufKey{"b", "2"}); !ok || c.len() != 2 {
		t.Fatalf("other channel's message lost (%d held)", c.len())
	}
	for _, typ := range []reflect.Type{reflect.TypeOf(fingerprint{}), reflect.TypeOf(doneMark{})} {
		if hasPointers(typ) {
			t.Errorf("%v holds a pointer: the cache would be scanned by every collection", typ)
		}
	}
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	default:
		return true
	}
}
