// Command ximctl is the developer's and operator's tool for ximd:
//
//	ximctl send    stream one assistant message (deltas + final) to a channel, print the ack
//	ximctl invoke  invoke one of the Card's IM tools on a channel, print the tool.result
//	ximctl target  run a webhook target on loopback that prints every call ximd makes
//	ximctl agent   play xAgent: ack and answer every user message, with failure injection
//	ximctl tail    print every packet of a channel as it passes through NATS, both ways
//	ximctl status  channels, pending user messages, failures, stream and consumer lag
//	ximctl pairings  a bot's pending pairing codes; approve one
//	ximctl bench   the load tool: deltas/s, finals/s, ack and display latency vs raw JetStream
//	ximctl conformance  check a running ximd against the IM v2 profile through its edge API
//
// The flags mean the same in every command: -http (ximd's HTTP edge), -token (xAgent's bearer
// token), -nats (the NATS server), -channel (a connector_channel_id). docs/ximctl.md has more.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: ximctl <command> [flags]

commands:
  send     stream one assistant message (deltas + final) to a channel and print the ack
  invoke   invoke one of the Card's IM tools (im.send_message, im.reply_message, im.send_file)
  target   run a loopback webhook target that prints every call ximd makes to it
  agent    play xAgent: ack every user message and stream an answer (deltas + final)
  tail     print every packet of a channel as it passes through NATS, both ways (read-only)
  status   channels, pending user messages, failures, stream and consumer figures (lag)
  pairings a bot's pending pairing codes (-bot ID), or approve one (-approve CODE)
  bench    load tool: drive deltas and finals through a ximd edge into a loopback webhook target
  conformance  play xAgent and a webhook target against a running ximd: the IM v2 profile's checklist

Common flags: -http URL (ximd HTTP edge, default http://$XIM_HTTP_ADDR or http://127.0.0.1:8080),
-token T (default $XIM_AGENT_TOKEN, else ./data/agent-token), -nats URL (default $XIM_NATS_URL
or nats://127.0.0.1:4222), -channel ID.
Run "ximctl <command> -h" for a command's description and flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "send":
		err = runSend(ctx, args[1:], stdout, stderr)
	case "invoke":
		err = runInvoke(ctx, args[1:], stdout, stderr)
	case "target":
		err = runTarget(ctx, args[1:], stdout, stderr)
	case "agent":
		err = runAgent(ctx, args[1:], stdout, stderr)
	case "tail":
		err = runTail(ctx, args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "pairings":
		err = runPairings(ctx, args[1:], stdout, stderr)
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "conformance":
		err = runConformance(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ximctl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if errors.Is(err, errHelp) {
			return 0
		}
		if errors.Is(err, errUsage) {
			return 2
		}
		fmt.Fprintf(stderr, "ximctl %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
