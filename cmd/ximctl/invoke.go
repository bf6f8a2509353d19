package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ximd/ximd/pipeline/xagent"
	"github.com/ximd/ximd/profile"
)

func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl invoke", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	channel := channelFlag(fs, "whose chat the tool acts on (required)")
	tool := fs.String("tool", profile.ToolSendMessage, "the IM tool: im.send_message, im.reply_message or im.send_file")
	rawArgs := fs.String("args", `{"text":"Hello from an IM tool."}`, "the tool's arguments, a JSON object (see GET /v1/card for each tool's input_schema)")
	invocationID := fs.String("invocation-id", "", "invocation_id (default: a new one; give the same one again to see the first result again)")
	setUsage(fs, stderr, "-channel ID [-tool NAME] [-args JSON] [flags]", "Invokes one of the Card's IM tools as xAgent would (tool.invoke) and prints its tool.result.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *channel == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	var arguments json.RawMessage
	if err := json.Unmarshal([]byte(*rawArgs), &arguments); err != nil {
		return fmt.Errorf("-args: not JSON: %w", err)
	}
	if err := cf.resolve(); err != nil {
		return err
	}
	if *invocationID == "" {
		*invocationID = xagent.NewID("inv")
	}
	a, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	fmt.Fprintf(stdout, "-> %-12s %s %s %s\n", profile.TypeToolInvoke, *invocationID, *tool, arguments)
	pid, err := a.Invoke(ctx, *channel, *invocationID, *tool, arguments)
	if err != nil {
		return err
	}
	env, err := a.Reply(pid, 60*time.Second)
	if err != nil {
		return fmt.Errorf("waiting for the tool.result: %w", err)
	}
	fmt.Fprintf(stdout, "<- %-12s %s\n", env.Type, env.Payload)
	if env.Type == profile.TypeError {
		e, _ := xagent.ErrorOf(env)
		return fmt.Errorf("refused: %s: %s", e.Code, e.Message)
	}
	r, err := xagent.ToolResultOf(env)
	if err != nil {
		return err
	}
	if !r.OK && r.Error != nil {
		return fmt.Errorf("tool failed: %s: %s", r.Error.Code, r.Error.Message)
	}
	return nil
}
