package matrix

import (
	"context"
	"encoding/json"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
)

// ximdContent is what Lookup reads of an event ximd sent.
type ximdContent struct {
	Body       string       `json:"body"`
	Key        string       `json:"org.ximd.idempotency_key"`
	Part       int          `json:"org.ximd.part"`
	Parts      int          `json:"org.ximd.parts"`
	Final      bool         `json:"org.ximd.final"`
	TextSHA    string       `json:"org.ximd.text_sha256"`
	NewContent *ximdContent `json:"m.new_content"`
	RelatesTo  *relatesTo   `json:"m.relates_to"`
}

type relatesTo struct {
	RelType string     `json:"rel_type"`
	EventID id.EventID `json:"event_id"`
}

// LookupRecheck is how long Lookup waits before reading the room once more when it found
// nothing: a homeserver lists an event in /messages a moment after it accepted it (Dendrite
// indexes it asynchronously), and an event sent just before a crash must not be taken as absent.
const LookupRecheck = time.Second

// Lookup implements adapter.Reconciler: it reads the room's newest events (at most
// LookupEvents) for the bot's events carrying the idempotency key, twice LookupRecheck apart
// when the first reading finds nothing. Found: the message's first event, with the content of
// its latest edit; it is final when that content is marked final and every event of the
// message (its parts and files) is in the room.
func (t *Target) Lookup(ctx context.Context, key string) (adapter.Shown, bool, error) {
	shown, found, err := t.lookup(ctx, key)
	if err != nil || found {
		return shown, found, err
	}
	select {
	case <-time.After(LookupRecheck):
	case <-ctx.Done():
		return adapter.Shown{}, false, ctx.Err()
	}
	return t.lookup(ctx, key)
}

func (t *Target) lookup(ctx context.Context, key string) (adapter.Shown, bool, error) {
	user, err := t.acc.user(ctx)
	if err != nil {
		return adapter.Shown{}, false, mapErr("whoami", err)
	}
	filter := &mautrix.FilterPart{Types: []event.Type{event.EventMessage}, Senders: []id.UserID{user}}
	latest := map[id.EventID]*ximdContent{} // the newest edit of each event
	parts := map[int]bool{}
	var main id.EventID
	var mainContent *ximdContent
	from := ""
	for read := 0; read < LookupEvents; {
		var resp *mautrix.RespMessages
		err := t.acc.call("messages", func() error {
			var err error
			resp, err = t.acc.cli.Messages(ctx, t.room, from, "", mautrix.DirectionBackward, filter, 100)
			return err
		})
		if err != nil {
			return adapter.Shown{}, false, err
		}
		for _, ev := range resp.Chunk {
			var c ximdContent
			if json.Unmarshal(ev.Content.VeryRaw, &c) != nil {
				continue
			}
			if c.RelatesTo != nil && c.RelatesTo.RelType == "m.replace" && c.NewContent != nil {
				if _, seen := latest[c.RelatesTo.EventID]; !seen { // newest first
					latest[c.RelatesTo.EventID] = c.NewContent
				}
				continue
			}
			if c.Key != key {
				continue
			}
			parts[c.Part] = true
			if c.Part == 0 {
				main, mainContent = ev.ID, &c
			}
		}
		read += len(resp.Chunk)
		if resp.End == "" || len(resp.Chunk) == 0 || main != "" {
			break
		}
		from = resp.End
	}
	if main == "" {
		return adapter.Shown{}, false, nil
	}
	c := mainContent
	if e, ok := latest[main]; ok {
		c = e
	}
	final := c.Final
	for i := 0; final && i < c.Parts; i++ {
		final = parts[i]
	}
	return adapter.Shown{ID: string(main), Final: final, Text: c.Body, TextSHA256: c.TextSHA}, true, nil
}
