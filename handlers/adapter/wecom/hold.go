package wecom

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// One connection per robot (edge-api §7.2.7): WeCom keeps one subscribed connection per robot (a
// second subscribe drops the first) and takes every command of the robot (replies, proactive
// messages, uploads) on it. So the robot's poll loop holds the connection, in one process, and
// every channel's calls run there: through the node's relay (adapter.Relay) from any other
// process, directly in that one. What the connection knows (each conversation's latest
// callback to reply to, the streams' ages, the conversation budgets, thinking bubbles) is then
// in one place.
//
// The client lives while it is used (adapter.Clients.Acquire): a poll loop started again (a
// channel of the robot added) finds the connection still open within linger. A probe with no
// process holding the robot (the first channel of a robot), or held with another secret,
// subscribes itself for as long as the probe takes.
//
// Without a relay (the adapter used on its own) every call runs in this process on the robot's
// client.

// linger keeps a robot's connection open after its last use, for the next poll loop or call:
// a probe's connection at a PUT is the one the poll loop then reads (it starts within a second,
// or a second after the worker started), with what WeCom pushed to it meanwhile.
const linger = 5 * time.Second

// The calls a channel makes on the connection.
const (
	opSend     = "send"
	opEdit     = "edit"
	opActivity = "activity"
	opProbe    = "probe"
)

// call is one call of a channel on the robot's connection, as relayed: the channel's config
// without the secret (the holder's connection has it), what to do, and for a probe the account
// key of the secret to check.
type call struct {
	Op       string            `json:"op"`
	Config   publicConfig      `json:"config"`
	ID       string            `json:"id,omitempty"`
	Message  *adapter.Message  `json:"message,omitempty"`
	Activity *adapter.Activity `json:"activity,omitempty"`
	Account  string            `json:"account,omitempty"`
}

// Answers of a probe call.
const (
	probeSubscribed = "subscribed"    // the holder is subscribed with the secret
	probeOther      = "other_account" // the holder's connection has another secret
)

// acquire is the robot's client in this process, connecting, until release.
func (a *Adapter) acquire(c *config) (*client, func()) {
	cli, release := a.Accounts.Acquire(c.accountKey(), linger, func() *client { return newClient(c, a.Logger, a.timing) })
	cli.start()
	return cli, release
}

// call runs req for the channel of config c on the robot's connection, where it is held.
func (a *Adapter) call(ctx context.Context, c *config, req call) (string, error) {
	req.Config = c.public()
	if a.Relay == nil {
		cli, release := a.acquire(c)
		defer release()
		return a.run(ctx, cli, c, req)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return "", profile.Errorf(profile.CodeInternal, "wecom: relay call: %v", err)
	}
	out, err := a.Relay.Call(ctx, c.pollKey(), b)
	return string(out), err
}

// serve runs the calls other processes relay on cli, the connection of acct this process holds.
func (a *Adapter) serve(cli *client, acct *config) adapter.RelayFunc {
	return func(ctx context.Context, b []byte) ([]byte, error) {
		var req call
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, profile.Errorf(profile.CodeInternal, "wecom: relayed call unreadable: %v", err)
		}
		out, err := a.run(ctx, cli, req.Config.config(acct.secret), req)
		return []byte(out), err
	}
}

// run does req on cli for the channel of config c.
func (a *Adapter) run(ctx context.Context, cli *client, c *config, req call) (string, error) {
	l := &line{a: a, cli: cli, cfg: c}
	switch {
	case req.Op == opSend && req.Message != nil:
		return l.sendMessage(ctx, *req.Message)
	case req.Op == opEdit && req.Message != nil:
		return "", l.edit(ctx, req.ID, *req.Message)
	case req.Op == opActivity && req.Activity != nil:
		return "", l.showActivity(ctx, *req.Activity)
	case req.Op == opProbe:
		if req.Account != c.accountKey() {
			return probeOther, nil
		}
		if _, _, err := cli.connected(ctx, cmdSubscribe); err != nil {
			return "", err
		}
		return probeSubscribed, nil
	}
	return "", profile.Errorf(profile.CodeInternal, "wecom: unknown relayed call %q", req.Op)
}

// probe checks that WeCom takes the robot's bot_id and secret: on the connection that holds the
// robot when its secret is c's, else by subscribing here for the probe's time.
func (a *Adapter) probe(ctx context.Context, c *config) error {
	if a.Relay != nil {
		out, err := a.call(ctx, c, call{Op: opProbe, Account: c.accountKey()})
		switch {
		case err == nil && out == probeSubscribed:
			return nil
		case err != nil && !errors.Is(err, adapter.ErrNotHeld):
			return refusedAtProbe(err)
		}
	}
	cli, release := a.acquire(c)
	defer release()
	if _, _, err := cli.connected(ctx, cmdSubscribe); err != nil {
		return refusedAtProbe(err)
	}
	return nil
}

func refusedAtProbe(err error) error {
	return profile.Errorf(profile.CodeTargetConfigInvalid, "wecom refused the robot's bot_id and secret, or cannot be reached: %s", profile.AsError(err).Message)
}
