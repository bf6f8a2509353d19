package edge

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ximd/ximd/subjects"
)

// A channel's batch is published whole when the next delta would pass batchMaxFrames or
// batchMaxBytes; a delta larger than batchMaxBytes goes alone; channels batch apart; take
// empties a channel's batch, and what a batch stores splits back into its deltas in order.
func TestBatchesBounds(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	bs := newBatches()
	small := bytes.Repeat([]byte("d"), 100)
	for i := range batchMaxFrames {
		if full := bs.add(ctx, "a", "xim.in.a.delta", now, small); full != nil {
			t.Fatalf("delta %d published a batch of %d", i+1, len(full.frames))
		}
	}
	if bs.add(ctx, "b", "xim.in.b.delta", now, small) != nil {
		t.Fatal("another channel's delta published channel a's batch")
	}
	full := bs.add(ctx, "a", "xim.in.a.delta", now, small)
	if full == nil || len(full.frames) != batchMaxFrames || full.subject != "xim.in.a.delta" {
		t.Fatalf("delta %d: batch %+v, want the %d before it", batchMaxFrames+1, full, batchMaxFrames)
	}

	big := bytes.Repeat([]byte("B"), batchMaxBytes-50)
	if full := bs.add(ctx, "a", "xim.in.a.delta", now, big); full == nil || len(full.frames) != 1 {
		t.Fatalf("a delta past %d bytes did not publish the batch before it: %+v", batchMaxBytes, full)
	}
	huge := bytes.Repeat([]byte("H"), 2*batchMaxBytes)
	if full := bs.add(ctx, "a", "xim.in.a.delta", now, huge); full == nil || len(full.frames) != 1 || len(full.frames[0]) != len(big) {
		t.Fatalf("huge delta: %+v", full)
	}
	alone := bs.take("a")
	if alone == nil || len(alone.frames) != 1 || len(alone.frames[0]) != len(huge) {
		t.Fatalf("the huge delta is not alone in its batch: %+v", alone)
	}
	if bs.take("a") != nil {
		t.Fatal("take left a batch behind")
	}

	b := bs.take("b")
	b.frames = append(b.frames, []byte("second"), []byte("third"))
	data, lengths := b.payload()
	frames, err := subjects.SplitFrames(lengths, data)
	if err != nil || len(frames) != 3 || string(frames[1]) != "second" || string(frames[2]) != "third" {
		t.Fatalf("payload splits into %q, %v", frames, err)
	}
	if data, lengths := (&batch{frames: [][]byte{small}}).payload(); lengths != "" || !bytes.Equal(data, small) {
		t.Fatalf("a lone packet is stored with lengths %q", lengths)
	}
}
