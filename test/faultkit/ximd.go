package faultkit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
)

// Env reads an integer knob of the long form (XIMD_FAULT_*), def when unset.
func Env(t testing.TB, name string, def int) int {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// Channels returns n channels named <prefix>_NN: even ones stream with `edit`, odd ones with
// `none`; activity alternates `status` and `typing` in pairs.
func Channels(prefix string, n int) []Channel {
	out := make([]Channel, n)
	for i := range out {
		out[i] = Channel{ID: fmt.Sprintf("%s_%02d", prefix, i), Streaming: "edit", Activity: "status"}
		if i%2 == 1 {
			out[i].Streaming = "none"
		}
		if (i/2)%2 == 1 {
			out[i].Activity = "typing"
		}
	}
	return out
}

// OpenChannels opens every channel on the node, bound to tg; each channel's chat_id is its own
// id, so the target's activity calls can be told apart.
func OpenChannels(n *testkit.Node, tg *testkit.Target, chans []Channel) error {
	for _, ch := range chans {
		cfg := tg.Config(ch.Streaming, ch.Activity)
		cfg["chat_id"] = ch.ID
		cfg["lookup"] = ch.Lookup
		if err := n.OpenChannel(ch.ID, cfg); err != nil {
			return err
		}
	}
	return nil
}

// Ximd is a ximd process of one role with its HTTP address.
type Ximd struct {
	*Proc
	Addr string
}

// StartXimd starts bin with env (XIM_HTTP_ADDR is set to addr) and waits for /readyz.
func StartXimd(ctx context.Context, name, bin, role, addr, logPath string, env []string) (*Ximd, error) {
	p := &Proc{Name: name, Bin: bin, Args: []string{role}, Env: append([]string{"XIM_HTTP_ADDR=" + addr}, env...), LogPath: logPath}
	x := &Ximd{Proc: p, Addr: addr}
	return x, x.Restart(ctx)
}

// Restart starts a new run and waits until it is ready (60s at most).
func (x *Ximd) Restart(ctx context.Context) error {
	if err := x.Start(); err != nil {
		return err
	}
	if err := WaitHTTP200(ctx, "http://"+x.Addr+"/readyz", 60*time.Second, x.Running); err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", x.Name, err, x.LogTail(40))
	}
	return nil
}
