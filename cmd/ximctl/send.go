package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ximd/ximd/pipeline/xagent"
	"github.com/ximd/ximd/profile"
)

func runSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl send", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	channel := channelFlag(fs, "to send to (required)")
	text := fs.String("text", "Hello from ximctl: this message was streamed word by word.", "the message text")
	messageID := fs.String("message-id", "", "message_id (default: a new one)")
	stream := fs.Bool("stream", true, "send the text as deltas (one per word) before the final")
	delay := fs.Duration("delay", 100*time.Millisecond, "pause between deltas")
	activity := fs.Bool("activity", true, "send chat.activity thinking before the text")
	setUsage(fs, stderr, "-channel ID [flags]", "Sends one assistant message to a channel as xAgent would (direct or streamed) and prints the replies.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *channel == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := cf.resolve(); err != nil {
		return err
	}
	if *messageID == "" {
		*messageID = xagent.NewID("msg")
	}
	a, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	show := func(dir string, typ string, payload any) {
		b, _ := json.Marshal(payload)
		fmt.Fprintf(stdout, "%s %-20s %s\n", dir, typ, b)
	}
	sendPkt := func(typ string, payload any) (string, error) {
		show("->", typ, payload)
		return a.Send(ctx, *channel, typ, payload)
	}
	if *activity {
		if _, err := sendPkt(profile.TypeActivity, map[string]any{"status": "thinking"}); err != nil {
			return err
		}
	}
	if *stream {
		words := strings.SplitAfter(*text, " ")
		for i, w := range words {
			if _, err := sendPkt(profile.TypeDelta, map[string]any{"message_id": *messageID, "sequence": i + 1, "text": w}); err != nil {
				return err
			}
			time.Sleep(*delay)
		}
	}
	pid, err := sendPkt(profile.TypeMessage, map[string]any{"message_id": *messageID, "text": *text})
	if err != nil {
		return err
	}
	for {
		env, err := a.Next(30 * time.Second)
		if err != nil {
			return fmt.Errorf("waiting for the ack: %w", err)
		}
		show("<-", env.Type, json.RawMessage(env.Payload))
		if env.ReplyTo == pid && env.Type == profile.TypeAck {
			var ack profile.Ack
			_ = json.Unmarshal(env.Payload, &ack)
			if ack.Status == profile.AckRejected {
				return fmt.Errorf("rejected: %s", ack.Code)
			}
			return nil
		}
	}
}
