package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ximd/ximd/cmd/internal/agent"
)

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl agent", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	var cfg agent.Config
	fs.StringVar(&cfg.Reply, "reply", agent.DefaultReply, `answer template; "{text}" is replaced by the user's text`)
	fs.IntVar(&cfg.Chunk, "chunk", 1, "words per chat.message.delta")
	fs.DurationVar(&cfg.Delay, "delay", 80*time.Millisecond, "pause between deltas (and before the final)")
	fs.DurationVar(&cfg.Think, "think", 500*time.Millisecond, "how long thinking, then the tool status, is shown before the text streams")
	fs.BoolVar(&cfg.Tool, "tool", true, "show chat.activity tool ("+agent.ToolName+") after thinking")
	fs.DurationVar(&cfg.AckTimeout, "ack-timeout", 10*time.Second, "send a final again when no ack arrives within this")
	fs.IntVar(&cfg.Retries, "retries", 5, "times a final is sent again (ack timeout, retryable rejection) before giving up")
	fs.DurationVar(&cfg.RetryBackoff, "retry-backoff", time.Second, "first pause before a final is sent again; doubles each time, up to 30s")
	fs.Float64Var(&cfg.FailRate, "fail-rate", 0, "probability (0..1) of refusing a new user message: rejected, internal_error, retryable")
	fs.Float64Var(&cfg.NoAckRate, "no-ack-rate", 0, "probability (0..1) of answering a new user message without acking it (a lost ack)")
	fs.BoolVar(&cfg.EchoFiles, "echo-files", false, "send the user's files back with the answer (fetched from ximd, uploaded again)")
	fs.BoolVar(&cfg.FileTool, "file-tool", false, "answer a message that asks for a file with one sent by the im.send_file tool (tool.invoke)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: ximctl agent [flags]

Plays xAgent against a running ximd, for developing an integration. It connects to
ws://<addr>/v1/ws and answers every user message (Connector -> xAgent chat.message):
  1. acks it: accepted, or duplicate for a message_id it already answered on that channel
     (and then no second answer), or rejected for an invalid payload or a reused message_id
     with other content;
  2. answers on the same channel: chat.activity thinking, then tool (-tool), then idle, then
     the answer streamed as chat.message.deltas (-chunk words each, -delay apart), then the final
     chat.message; it waits for the final's ack and sends the final again (same message_id,
     new packet_id) after a timeout (-ack-timeout) or a retryable rejection or error, with
     back-off (-retry-backoff), at most -retries times.
The answer is -reply with "{text}" replaced by the user's text, plus a line naming the files
the user sent (with -echo-files they are fetched from ximd, uploaded to the channel again and
attached to the final). -fail-rate and -no-ack-rate inject failures, to watch
ximd's retry path. Every packet in (<-) and out (->) is printed; it runs until Ctrl-C and
reconnects with back-off (1s..30s) when the connection drops.

flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "ximctl agent: %v\n", err)
		return errUsage
	}
	if err := cf.resolve(); err != nil {
		return err
	}
	cfg.Addr, cfg.Token, cfg.Name = cf.addr, cf.token, "ximctl agent"
	agent.New(cfg, stdout, stderr).Run(ctx)
	return nil
}
