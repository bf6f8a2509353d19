// Command ximctl is the developer's and operator's tool for ximd:
//
//	ximctl send    stream one assistant message (deltas + final) to a channel, print the ack
//	ximctl target  run a webhook target on loopback that prints every call ximd makes
//	ximctl agent   play xAgent: ack and answer every user message, with failure injection
//	ximctl bench   the load tool: deltas/s, finals/s, ack and display latency vs raw JetStream
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: ximctl <command> [flags]

commands:
  send     stream one assistant message (deltas + final) to a channel and print the ack
  target   run a loopback webhook target that prints every call ximd makes to it
  agent    play xAgent: ack every user message and stream an answer (deltas + final)
  bench    load tool: drive deltas and finals through a ximd edge into a loopback webhook target

Run "ximctl <command> -h" for a command's flags.
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
	case "target":
		err = runTarget(ctx, args[1:], stdout, stderr)
	case "agent":
		err = runAgent(ctx, args[1:], stdout, stderr)
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ximctl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		if err == errUsage {
			return 2
		}
		fmt.Fprintf(stderr, "ximctl %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
