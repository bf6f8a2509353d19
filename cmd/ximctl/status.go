package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// statusTimeout bounds a whole ximctl status.
const statusTimeout = 20 * time.Second

// statusReport is what ximctl status prints (-json: as is).
type statusReport struct {
	NATS string `json:"nats"`
	// ChannelsFrom is where the channels came from: "kv" (bucket xim_channels) or the HTTP API URL.
	ChannelsFrom string          `json:"channels_from"`
	Channels     []channelStatus `json:"channels"`
	Streams      []streamStatus  `json:"streams"`
	// Errors are the parts that could not be read; the rest is still reported.
	Errors []string `json:"errors,omitempty"`
}

type channelStatus struct {
	ID              string `json:"connector_channel_id"`
	Adapter         string `json:"adapter"`
	OpenedAt        int64  `json:"opened_at,omitempty"` // Unix ms (KV only)
	PendingOutbound int    `json:"pending_outbound"`    // user messages not yet acked by xAgent
	// Failures are the channel's recent terminal failures, newest first.
	Failures []handlers.Failure `json:"failures"`
}

type streamStatus struct {
	Name      string           `json:"name"`
	Messages  uint64           `json:"messages"`
	Bytes     uint64           `json:"bytes"`
	Consumers []consumerStatus `json:"consumers"`
}

type consumerStatus struct {
	Name string `json:"name"`
	// NumPending is the lag: messages of the stream the consumer has not delivered yet.
	NumPending     uint64 `json:"num_pending"`
	NumAckPending  int    `json:"num_ack_pending"`
	NumRedelivered int    `json:"num_redelivered"`
	NumWaiting     int    `json:"num_waiting"` // pull requests waiting: a worker is pulling
	// PinnedClientID is the pinned client of the consumer's priority group, if any.
	PinnedClientID string `json:"pinned_client_id,omitempty"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl status", flag.ContinueOnError)
	nf := natsFlag(fs)
	var cf connFlags
	cf.register(fs)
	channel := channelFlag(fs, "to show (default: every channel)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	// Channels come from KV unless the HTTP API is asked for (-http, -addr or -token given).
	maxFailures := fs.Int("failures", 5, "recent failures listed per channel in the text output")
	setUsage(fs, stderr, "[flags]", "Shows channels, pending user messages, recent failures and stream/consumer figures (lag).")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if *channel != "" {
		if err := subjects.Token(*channel); err != nil {
			return fmt.Errorf("-channel: %w", err)
		}
	}
	useHTTP := false
	fs.Visit(func(f *flag.Flag) { useHTTP = useHTTP || f.Name == "http" || f.Name == "addr" || f.Name == "token" })
	if useHTTP {
		if err := cf.resolve(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	rep := collectStatus(ctx, nf, useHTTP, cf, *channel)
	nothing := len(rep.Channels) == 0 && len(rep.Streams) == 0 && len(rep.Errors) > 0
	switch {
	case nothing && !*asJSON: // no table to show
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	default:
		writeStatus(stdout, rep, *maxFailures, time.Now())
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("%d part(s) could not be read: %s", len(rep.Errors), strings.Join(rep.Errors, "; "))
	}
	return nil
}

// collectStatus reads everything it can; what failed is listed in Errors.
func collectStatus(ctx context.Context, nf natsFlags, useHTTP bool, cf connFlags, only string) statusReport {
	rep := statusReport{NATS: nf.redacted(), ChannelsFrom: "kv", Channels: []channelStatus{}, Streams: []streamStatus{}}
	fail := func(what string, err error) { rep.Errors = append(rep.Errors, what+": "+err.Error()) }
	var js jetstream.JetStream
	nc, err := nf.connect(nats.Name("ximctl-status"), nats.Timeout(5*time.Second))
	if err != nil {
		fail("nats", err)
	} else {
		defer nc.Close()
		if js, err = jetstream.New(nc); err != nil {
			fail("jetstream", err)
		}
	}
	if useHTTP {
		rep.ChannelsFrom = "http://" + cf.addr + "/v1/channels"
		chs, err := channelsFromHTTP(ctx, cf, only)
		if err != nil {
			fail("channels from "+rep.ChannelsFrom, err)
		}
		rep.Channels = append(rep.Channels, chs...)
	} else if js != nil {
		chs, err := channelsFromKV(ctx, js, only)
		if err != nil {
			fail("channels from KV "+subjects.BucketChannels, err)
		}
		rep.Channels = append(rep.Channels, chs...)
	}
	if js == nil {
		return rep
	}
	for _, name := range []string{subjects.StreamIn, subjects.StreamOut, subjects.StreamReplies, subjects.StreamPoison} {
		st, err := streamFigures(ctx, js, name)
		if err != nil {
			fail("stream "+name, err)
			continue
		}
		rep.Streams = append(rep.Streams, st)
	}
	return rep
}

// channelsFromKV lists the channels in KV xim_channels, their pending user messages (work items
// in XIM_OUT) and recent failures (KV xim_outbox).
func channelsFromKV(ctx context.Context, js jetstream.JetStream, only string) ([]channelStatus, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketChannels)
	if err != nil {
		return nil, err
	}
	keys := ">"
	if only != "" {
		keys = only
	}
	w, err := kv.Watch(ctx, keys, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []channelStatus
	for e := range w.Updates() {
		if e == nil {
			break // every current value has been seen
		}
		var ch adapter.Channel
		if err := json.Unmarshal(e.Value(), &ch); err != nil {
			return nil, fmt.Errorf("channel %s: %w", e.Key(), err)
		}
		out = append(out, channelStatus{ID: e.Key(), Adapter: ch.Target.Adapter, OpenedAt: ch.OpenedAt})
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	slices.SortFunc(out, func(a, b channelStatus) int { return strings.Compare(a.ID, b.ID) })
	pending, err := pendingByChannel(ctx, js)
	if err != nil {
		return out, fmt.Errorf("pending user messages: %w", err)
	}
	outbox, err := js.KeyValue(ctx, subjects.BucketOutbox)
	if err != nil {
		return out, err
	}
	for i := range out {
		out[i].PendingOutbound = pending[out[i].ID]
		if out[i].Failures, err = failuresOf(ctx, outbox, out[i].ID); err != nil {
			return out, fmt.Errorf("failures of %s: %w", out[i].ID, err)
		}
	}
	return out, nil
}

// pendingByChannel counts the XIM_OUT work items of each channel: one per pending user message.
func pendingByChannel(ctx context.Context, js jetstream.JetStream) (map[string]int, error) {
	s, err := js.Stream(ctx, subjects.StreamOut)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subjects.OutAll))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for subj, n := range info.State.Subjects {
		out[subj[strings.LastIndexByte(subj, '.')+1:]] = int(n)
	}
	return out, nil
}

func failuresOf(ctx context.Context, outbox jetstream.KeyValue, channel string) ([]handlers.Failure, error) {
	key, err := subjects.FailuresKey(channel)
	if err != nil {
		return nil, err
	}
	e, err := outbox.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return []handlers.Failure{}, nil
	}
	if err != nil {
		return nil, err
	}
	list := []handlers.Failure{}
	return list, json.Unmarshal(e.Value(), &list)
}

// errChannelNotOpen is a GET /v1/channels/{id} answered 404 channel_not_open.
var errChannelNotOpen = errors.New("channel not open")

// channelsFromHTTP lists the channels with GET /v1/channels, following its pages, and reads each
// one's stats and failures with GET /v1/channels/{id} (only that one when only is set).
func channelsFromHTTP(ctx context.Context, cf connFlags, only string) ([]channelStatus, error) {
	base := "http://" + cf.addr + "/v1/channels"
	get := func(u string, v any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+cf.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			var e struct{ Code string }
			if json.Unmarshal(b, &e) == nil && e.Code == profile.CodeChannelNotOpen {
				return errChannelNotOpen
			}
			return fmt.Errorf("GET %s: %s %s", u, resp.Status, strings.TrimSpace(string(b)))
		}
		return json.Unmarshal(b, v)
	}
	type view struct {
		ID     string `json:"connector_channel_id"`
		Target struct {
			Adapter string `json:"adapter"`
		} `json:"target"`
		Stats struct {
			PendingOutbound int `json:"pending_outbound"`
		} `json:"stats"`
		Failures []handlers.Failure `json:"failures"`
	}
	var ids []string
	if only != "" {
		ids = []string{only}
	} else {
		// The list comes in pages (edge-api §4.1): follow next until it is null.
		for u := base; ; {
			var page struct {
				Channels []view  `json:"channels"`
				Next     *string `json:"next"`
			}
			if err := get(u, &page); err != nil {
				return nil, err
			}
			for _, c := range page.Channels {
				ids = append(ids, c.ID)
			}
			if page.Next == nil {
				break
			}
			u = base + "?after=" + url.QueryEscape(*page.Next)
		}
	}
	var out []channelStatus
	for _, id := range ids {
		var v view
		if err := get(base+"/"+url.PathEscape(id), &v); errors.Is(err, errChannelNotOpen) {
			continue // closed since it was listed, or -channel names no open channel
		} else if err != nil {
			return out, err
		}
		if v.Failures == nil {
			v.Failures = []handlers.Failure{}
		}
		out = append(out, channelStatus{ID: v.ID, Adapter: v.Target.Adapter, PendingOutbound: v.Stats.PendingOutbound, Failures: v.Failures})
	}
	slices.SortFunc(out, func(a, b channelStatus) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// streamFigures reads a stream's size and each consumer's figures.
func streamFigures(ctx context.Context, js jetstream.JetStream, name string) (streamStatus, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return streamStatus{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return streamStatus{}, err
	}
	st := streamStatus{Name: name, Messages: info.State.Msgs, Bytes: info.State.Bytes, Consumers: []consumerStatus{}}
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		c := consumerStatus{Name: ci.Name, NumPending: ci.NumPending, NumAckPending: ci.NumAckPending,
			NumRedelivered: ci.NumRedelivered, NumWaiting: ci.NumWaiting}
		var pinned []string
		for _, g := range ci.PriorityGroups {
			if g.PinnedClientID != "" {
				pinned = append(pinned, g.PinnedClientID)
			}
		}
		c.PinnedClientID = strings.Join(pinned, ",")
		st.Consumers = append(st.Consumers, c)
	}
	if err := l.Err(); err != nil {
		return st, err
	}
	slices.SortFunc(st.Consumers, func(a, b consumerStatus) int { return strings.Compare(a.Name, b.Name) })
	return st, nil
}

// writeStatus prints the report as aligned tables.
func writeStatus(w io.Writer, rep statusReport, maxFailures int, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CHANNEL\tADAPTER\tOPENED\tPENDING OUT\tFAILURES\tLAST FAILURE\n")
	for _, c := range rep.Channels {
		opened, last := "-", "-"
		if c.OpenedAt > 0 {
			opened = time.UnixMilli(c.OpenedAt).Format(time.DateTime)
		}
		if len(c.Failures) > 0 {
			f := c.Failures[0]
			last = fmt.Sprintf("%s %s (%s)", f.Code, f.MessageID, ago(now, f.At))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", c.ID, c.Adapter, opened, c.PendingOutbound, len(c.Failures), last)
	}
	if len(rep.Channels) == 0 {
		fmt.Fprintf(tw, "(no channel)\t\t\t\t\t\n")
	}
	if len(rep.Streams) == 0 {
		_ = tw.Flush()
		return
	}
	fmt.Fprintf(tw, "\nSTREAM\tMESSAGES\tBYTES\n")
	for _, s := range rep.Streams {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", s.Name, s.Messages, humanBytes(s.Bytes))
	}
	fmt.Fprintf(tw, "\nSTREAM\tCONSUMER\tLAG (PENDING)\tACK PENDING\tREDELIVERED\tWAITING PULLS\tPINNED CLIENT\n")
	for _, s := range rep.Streams {
		for _, c := range s.Consumers {
			pinned := c.PinnedClientID
			if pinned == "" {
				pinned = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Name, c.Name, c.NumPending, c.NumAckPending, c.NumRedelivered, c.NumWaiting, pinned)
		}
	}
	var failures [][]string
	for _, c := range rep.Channels {
		for i, f := range c.Failures {
			if i == maxFailures {
				break
			}
			failures = append(failures, []string{c.ID, time.UnixMilli(f.At).Format(time.DateTime), f.MessageID, f.Code, excerpt(f.Message)})
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(tw, "\nRECENT FAILURES\tAT\tMESSAGE_ID\tCODE\tMESSAGE\n")
		for _, f := range failures {
			fmt.Fprintln(tw, strings.Join(f, "\t"))
		}
	}
	_ = tw.Flush()
}

func ago(now time.Time, atMillis int64) string {
	d := now.Sub(time.UnixMilli(atMillis))
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
