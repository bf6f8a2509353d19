package faultkit

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// Result is what one fault run found. Problems lists every violation in words; the counters
// are what the summary line reports.
type Result struct {
	Test       string
	Cycles     int // kill/stop cycles of the process under test
	Faults     int // faults injected (kills, SIGTERMs, NATS node stops)
	Packets    int64
	Finals     int
	Tools      int // of Finals: IM tool invocations (im.send_message)
	UserMsgs   int
	Reconnects int64
	Elapsed    time.Duration
	RSSPeakKiB int64

	// Duplicates: messages the target was asked to show twice: created by two POSTs, or two
	// final calls that are not the same edit repeated.
	Duplicates int
	// RepeatedFinalEdits: a final PATCH repeated with the same text on the same target message;
	// idempotent (an edit to the content it already has), so not a duplicate, but counted.
	RepeatedFinalEdits int
	// Losses: finals with no terminal ack, a terminal rejection other than
	// delivery_outcome_unknown, or an accepted/duplicate ack without the final at the target.
	Losses int
	// OutcomeUnknown: finals answered rejected delivery_outcome_unknown (allowed by the contract,
	// never sent again); UnknownUndelivered of them never reached the target at all.
	OutcomeUnknown, UnknownUndelivered int
	// Lookups: lookups by idempotency_key the target answered (channels with "lookup").
	Lookups int64
	// UserLost: user messages answered 202 that never reached the agent.
	UserLost int
	// StuckTyping: channels whose last activity call at the target is not idle.
	StuckTyping int
	// DisplayRegressions: a streamed message's text at the target shrank or changed instead of
	// growing, or it was touched after its final.
	DisplayRegressions int
	// BadCalls: target calls with a bad signature or for no known message.
	BadCalls int

	Problems []string
}

func (r *Result) problem(format string, args ...any) {
	if len(r.Problems) < 200 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Failed reports whether any check failed.
func (r *Result) Failed() bool {
	return r.Duplicates+r.Losses+r.UserLost+r.StuckTyping+r.DisplayRegressions+r.BadCalls > 0
}

// Summary is the one machine-greppable line the fault tests print.
func (r *Result) Summary() string {
	return fmt.Sprintf("fault summary: test=%s cycles=%d faults_injected=%d packets=%d finals=%d tools=%d user_messages=%d reconnects=%d "+
		"duplicates=%d losses=%d outcome_unknown=%d unknown_undelivered=%d lookups=%d repeated_final_edits=%d user_lost=%d stuck_typing=%d "+
		"display_regressions=%d bad_calls=%d rss_peak_mib=%.1f elapsed=%s",
		r.Test, r.Cycles, r.Faults, r.Packets, r.Finals, r.Tools, r.UserMsgs, r.Reconnects,
		r.Duplicates, r.Losses, r.OutcomeUnknown, r.UnknownUndelivered, r.Lookups, r.RepeatedFinalEdits, r.UserLost, r.StuckTyping,
		r.DisplayRegressions, r.BadCalls, float64(r.RSSPeakKiB)/1024, r.Elapsed.Round(time.Second))
}

// Check runs every check on what the target recorded and what the driver and the platform saw.
func Check(r *Result, calls []testkit.Call, d *Driver, p *Platform, channels []Channel) {
	r.Packets = d.Packets()
	r.Reconnects = d.Reconnects()
	finals := d.Finals()
	r.Finals = len(finals)
	for _, f := range finals {
		if f.Tool {
			r.Tools++
		}
	}

	byKey := map[string][]testkit.Call{}
	activity := map[string][]string{}
	for _, c := range calls {
		if !c.SignatureOK {
			r.BadCalls++
			r.problem("bad signature: %s %s", c.Method, c.Path)
		}
		switch {
		case c.Path == "/activity":
			chat, _ := c.Body["chat_id"].(string)
			status, _ := c.Body["status"].(string)
			activity[chat] = append(activity[chat], status)
		case strings.HasPrefix(c.Path, "/messages"):
			if c.Key == "" {
				r.BadCalls++
				r.problem("message call for no known message: %s %s %s", c.Method, c.Path, c.Raw)
				continue
			}
			byKey[c.Key] = append(byKey[c.Key], c)
		}
	}

	known := map[string]bool{}
	for _, f := range finals {
		known[f.Key()] = true
		cs := byKey[f.Key()]
		delivered := checkMessage(r, f, cs)
		term, acks, sends := f.Outcome()
		switch {
		case term == nil:
			r.Losses++
			r.problem("LOSS %s: no terminal ack after %d sends (acks %v); target calls: %s", f.Key(), sends, acks, describe(cs))
		case term.Status == profile.AckRejected && term.Code == profile.CodeDeliveryOutcomeUnknown:
			r.OutcomeUnknown++
			if !delivered {
				r.UnknownUndelivered++
			}
		case term.Status == profile.AckRejected:
			r.Losses++
			r.problem("LOSS %s: rejected %s (acks %v)", f.Key(), term.Code, acks)
		case !delivered:
			r.Losses++
			r.problem("LOSS %s: acked %s but the target has no final with its text; calls: %s", f.Key(), term.Status, describe(cs))
		}
	}
	for key, cs := range byKey {
		if !known[key] {
			r.BadCalls++
			r.problem("target calls for a message never sent: %s: %s", key, describe(cs))
		}
	}

	for _, ch := range channels {
		st := activity[ch.ID]
		if ch.Activity == "none" && len(st) > 0 {
			r.BadCalls++
			r.problem("activity none but %d activity calls on %s", len(st), ch.ID)
		}
		if len(st) > 0 && st[len(st)-1] != "idle" {
			r.StuckTyping++
			r.problem("STUCK %s (%s/%s): last activity call is %q (last calls %v)", ch.ID, ch.Streaming, ch.Activity, st[len(st)-1], tail(st, 6))
		}
	}

	got := d.UserMessages()
	acc := p.Accepted()
	r.UserMsgs = len(acc)
	for key, tmid := range acc {
		if got[key] == 0 {
			r.UserLost++
			r.problem("USER LOST %s (target message %s): answered 202, never reached the agent", key, tmid)
		}
	}
	for _, s := range p.Refused() {
		r.BadCalls++
		r.problem("user message refused: %s", s)
	}
}

// checkMessage checks one message's target calls and reports whether its final reached the target.
func checkMessage(r *Result, f *Final, cs []testkit.Call) (delivered bool) {
	posts, finalCalls := 0, []testkit.Call{}
	prev := ""
	for i, c := range cs {
		if c.Method == http.MethodPost {
			posts++
		}
		text := c.Text()
		if c.Final() {
			finalCalls = append(finalCalls, c)
			if text == f.Text {
				delivered = true
			} else {
				r.DisplayRegressions++
				r.problem("WRONG FINAL %s: final call %d has text %q, want %q", f.Key(), i, text, f.Text)
			}
		} else if len(finalCalls) > 0 {
			r.DisplayRegressions++
			r.problem("AFTER FINAL %s: call %d (%s %q) after the final", f.Key(), i, c.Method, text)
		}
		if !strings.HasPrefix(text, prev) {
			r.DisplayRegressions++
			r.problem("REGRESSION %s: call %d shows %q after %q", f.Key(), i, text, prev)
		}
		prev = text
	}
	switch {
	case posts > 1:
		r.Duplicates++
		r.problem("DUPLICATE %s: created %d times (POST with one idempotency_key): %s", f.Key(), posts, describe(cs))
	case len(finalCalls) > 1:
		same := true
		for _, c := range finalCalls[1:] {
			if c.Method != http.MethodPatch || c.Path != finalCalls[0].Path || string(c.Raw) != string(finalCalls[0].Raw) {
				same = false
			}
		}
		if same && finalCalls[0].Method == http.MethodPatch {
			r.RepeatedFinalEdits++
			r.problem("repeated final edit %s (idempotent): %s", f.Key(), describe(cs))
		} else {
			r.Duplicates++
			r.problem("DUPLICATE %s: %d final calls: %s", f.Key(), len(finalCalls), describe(cs))
		}
	}
	return delivered
}

func describe(cs []testkit.Call) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s %s final=%v len=%d at %s", c.Method, c.Path, c.Final(), len(c.Text()), c.At.Format("15:04:05.000")))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Poll calls cond every 50ms until it holds or the timeout passes; it reports whether it held.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Settled reports whether every user message the platform got a 202 for reached the driver and
// every channel's last activity call is idle: what the fault tests wait for before Check.
func Settled(calls []testkit.Call, d *Driver, p *Platform) bool {
	got := d.UserMessages()
	for key := range p.Accepted() {
		if got[key] == 0 {
			return false
		}
	}
	last := map[string]string{}
	for _, c := range calls {
		if c.Path == "/activity" {
			chat, _ := c.Body["chat_id"].(string)
			last[chat], _ = c.Body["status"].(string)
		}
	}
	for _, s := range last {
		if s != "idle" {
			return false
		}
	}
	return true
}
