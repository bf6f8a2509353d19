package handlers

import (
	"hash/maphash"
	"sync"

	"github.com/ximd/ximd/profile"
)

// doneCache is a bounded FIFO of the messages this worker completed, so retransmissions and late
// deltas of recent messages are answered without a KV round trip. It keeps what an answer needs
// as fingerprints, never the strings: it holds no pointer, so the garbage collector never scans
// it (at its default size of 100,000 messages, a cache of records made every collection mark
// about 15 MB more, which showed as ack latency spikes under load).
type doneCache struct {
	mu   sync.Mutex
	max  int
	m    map[fingerprint]doneMark
	ring []fingerprint // insertion order; the zero fingerprint is an empty slot
	next int
}

// fingerprint is a 128-bit hash of a string (two maphash sums with seeds random to the
// process): two different strings share one with a probability of about 2^-128, and nobody
// outside the process can choose strings that do.
type fingerprint [2]uint64

var fingerprintSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// fingerprintOf hashes the parts; a NUL separates them (a channel id has none).
func fingerprintOf(parts ...string) fingerprint {
	var f fingerprint
	for i, seed := range fingerprintSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		for j, s := range parts {
			if j > 0 {
				h.WriteByte(0)
			}
			h.WriteString(s)
		}
		f[i] = h.Sum64()
	}
	return f
}

// doneMark is what answers a final of a completed message (see answer).
type doneMark struct {
	channel uint64 // the channel's fingerprint, half of it: dropChannel matches on it
	digest  fingerprint
	packet  fingerprint // the accepted packet's packet_id
	seq     uint64      // and its stream sequence (0: not recorded)
}

// markOf is the mark of rec, a completed record of a message of channel.
func markOf(channel string, rec Record) doneMark {
	return doneMark{channel: fingerprintOf(channel)[0], digest: fingerprintOf(rec.Digest), packet: fingerprintOf(rec.PacketID), seq: rec.Seq}
}

// answer answers a final of a completed message_id: the stored packet that was accepted gets
// `accepted` again (a redelivery of it: same packet_id, same stream sequence), any other arrival
// `duplicate` (P-ACK-4), a byte-identical frame sent again included.
func (m doneMark) answer(packetID string, seq uint64, messageID, digest string) profile.Ack {
	if m.digest != fingerprintOf(digest) {
		return profile.Rejected(messageID, profile.Errorf(profile.CodeMessageIDConflict, "message_id %s was already used with different text or files", messageID))
	}
	if m.packet == fingerprintOf(packetID) && (m.seq == 0 || m.seq == seq) {
		return profile.Accepted(messageID)
	}
	return profile.Duplicate(messageID)
}

func newDoneCache(max int) *doneCache {
	return &doneCache{max: max, m: make(map[fingerprint]doneMark), ring: make([]fingerprint, max)}
}

func (c *doneCache) get(k bufKey) (doneMark, bool) {
	f := fingerprintOf(k.channel, k.messageID)
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[f]
	return m, ok
}

// put keeps the completed record rec of message k and returns its mark.
func (c *doneCache) put(k bufKey, rec Record) doneMark {
	f, m := fingerprintOf(k.channel, k.messageID), markOf(k.channel, rec)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[f]; ok {
		c.m[f] = m
		return m
	}
	if old := c.ring[c.next]; old != (fingerprint{}) {
		delete(c.m, old)
	}
	c.ring[c.next] = f
	c.next = (c.next + 1) % c.max
	c.m[f] = m
	return m
}

// dropChannel forgets the channel's messages (a fingerprint shared by chance with another
// channel only drops that one's entries too: they are then answered from KV).
func (c *doneCache) dropChannel(channel string) {
	ch := fingerprintOf(channel)[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	for f, m := range c.m {
		if m.channel == ch {
			delete(c.m, f)
		}
	}
}

// len is the number of completed messages the cache holds.
func (c *doneCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
