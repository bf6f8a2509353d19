package slack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker    = (*Adapter)(nil)
	_ adapter.BotProber   = (*Adapter)(nil)
	_ adapter.BotReceiver = (*Adapter)(nil)
)

// placeholderChannel is the channel_id a bot's config is checked with (adapter.BotTaker.Bind
// with no conversation); no call is ever made to it.
const placeholderChannel = "bot"

// Bounds of what a bot remembers per app (each is cleared whole when full: what is forgotten is
// asked of Slack again).
const (
	maxRemembered = 10000
	// unansweredFor is how long a thread the bot had no message in is believed to have none
	// (the bot's own message in it, or a mention admitted there, ends it sooner).
	unansweredFor = time.Minute
	// threadLookup bounds the messages of a thread read for the bot's own (conversations.replies).
	threadLookup = 1000
)

// ConversationKeys implements adapter.BotTaker: a bot's config names no conversation (no
// channel_id, no thread_ts).
func (a *Adapter) ConversationKeys() []string { return []string{"channel_id", "thread_ts"} }

// Bind implements adapter.BotTaker: the bot's config with channel_id = the conversation's id
// and, for a thread, thread_ts = the thread's ts (a bot's answers in a thread go into it).
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	set := map[string]any{"channel_id": placeholderChannel}
	if c.ID != "" {
		set["channel_id"] = c.ID
	}
	if c.Thread != "" {
		set["thread_ts"] = c.Thread
	}
	return adapter.BindConfig(bot, set)
}

// botConfig is a bot's config, bound to the placeholder conversation: its account.
func (a *Adapter) botConfig(b adapter.Bot) (*config, error) {
	raw, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return nil, err
	}
	return parseConfig(raw)
}

// ProbeBot implements adapter.BotProber: the bot token works (auth.test, asked afresh). A bot
// names no conversation, so none is checked.
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	c, err := a.botConfig(b)
	if err != nil {
		return err
	}
	if _, err := a.workspace(c).authTest(ctx); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "slack refused the bot token: %s", profile.AsError(err).Message)
	}
	return nil
}

// botEventsRoute is the path of a bot's Events API request URL:
// POST /v1/targets/slack/bots/{bot_id}/events.
const botEventsRoute = "events"

// ReceiveBot implements adapter.BotReceiver for POST /v1/targets/slack/bots/{bot_id}/events, the
// app's Events API request URL: the v0 signature with the bot's signing_secret (within
// SignatureWindow), url_verification answered with its challenge; a message in a conversation
// a channel PUT binds (same bot token) goes to that channel; any other reaches the bot (Admit),
// 200 once what it carries is durable or refused (a failure is 503: Slack sends the event again).
func (a *Adapter) ReceiveBot(w http.ResponseWriter, r *http.Request, b adapter.Bot, in adapter.Inboxes) (adapter.Received, error) {
	if r.PathValue("path") != botEventsRoute {
		return "", profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	c, err := a.botConfig(b)
	if err != nil || c.signingSecret == "" {
		return "", errBadSignature
	}
	body, err := adapter.ReadBody(r)
	if err != nil {
		return "", err
	}
	return a.serveEvents(w, r, body, c, in.Channels(), []adapter.Bot{b}, in, b.ID)
}

// serveEvents answers an Events API call whose config c names the app: signature, challenge,
// then the event to chans (those of c's bot token) or bots.
func (a *Adapter) serveEvents(w http.ResponseWriter, r *http.Request, body []byte, c *config, chans []adapter.Channel, bots []adapter.Bot, in adapter.Inboxes, route string) (adapter.Received, error) {
	if !a.signed(r, body, c.signingSecret) {
		return "", errBadSignature
	}
	var cb callback
	if err := json.Unmarshal(body, &cb); err != nil {
		return "", profile.Errorf(profile.CodeBadRequest, "not a Slack event: %v", err)
	}
	if cb.Type == "url_verification" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": cb.Challenge})
		return "challenge", nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	same := func(cc *config) bool { return cc.workspaceKey() == c.workspaceKey() }
	outcome, err := a.dispatch(ctx, cb, chans, bots, in, same)
	if err != nil {
		a.Logger.Warn("slack_event_failed", "route", route, "event_id", cb.EventID, "err", err)
		return "", profile.Errorf(profile.CodeUnavailable, "the event could not be stored; Slack sends it again")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{}`))
	return outcome, nil
}

// toBots offers a message event of a conversation no channel PUT binds to each of bots of the
// same app (same): the first outcome that is not Ignored is the event's.
func (a *Adapter) toBots(ctx context.Context, ev msgEvent, bots []adapter.Bot, in adapter.Inboxes, same func(*config) bool) (adapter.Received, error) {
	return adapter.Offer(bots, func(b adapter.Bot) (adapter.Received, error) {
		c, err := a.botConfig(b)
		if err != nil || !same(c) {
			return adapter.Ignored, nil
		}
		return a.toBot(ctx, c, b, ev, in)
	})
}

// toBot passes a message event to bot b (its account c): kind, key, mention and author as
// docs/adapters/slack.md says; then Admit, and the user message through the admitted channel's
// inbox, exactly as a channel's.
func (a *Adapter) toBot(ctx context.Context, c *config, b adapter.Bot, ev msgEvent, in adapter.Inboxes) (adapter.Received, error) {
	ws := a.workspace(c)
	me, err := ws.identity(ctx)
	if err != nil {
		return "", err
	}
	if ev.User == me.user || (ev.BotID != "" && ev.BotID == me.bot) {
		if ev.ThreadTS != "" {
			ws.lookups.answered(ev.Channel, ev.ThreadTS) // the bot's own message in a thread
		}
		return adapter.Ignored, nil
	}
	if secs, err := strconv.ParseFloat(ev.TS, 64); err == nil && b.Predates(int64(secs*1000)) {
		return adapter.Ignored, nil
	}
	seen := b.ID + "\x00" + ev.Channel + "\x00" + ev.TS
	if a.handled.Has(seen) {
		return adapter.Duplicate, nil // the app_mention of a message event, or a retry of a refused one
	}
	arr, text, err := a.arrival(ctx, ws, me, b, ev)
	if err != nil {
		return "", err
	}
	adm, err := in.Admit(ctx, b, arr)
	if err != nil {
		return "", err
	}
	if !adm.Admitted() {
		a.handled.Add(seen)
		return adapter.Ignored, nil
	}
	if arr.Conversation.Kind == adapter.Thread {
		ws.lookups.forget(ev.Channel, ev.ThreadTS) // an answer is coming: ask again next time
	}
	ev.Text = text
	outcome, err := a.receive(ctx, c, ev, adm.Channel.ID, adm.Inbox)
	if err == nil {
		a.handled.Add(seen)
	}
	return outcome, err
}

// arrival is what bot b's policy decides on for ev, and ev's text without the bot's mention.
func (a *Adapter) arrival(ctx context.Context, ws *workspace, me identity, b adapter.Bot, ev msgEvent) (adapter.Arrival, string, error) {
	isBot := ev.BotID != "" || ev.Subtype == "bot_message"
	conv := adapter.Conversation{Kind: adapter.Group, ID: ev.Channel}
	switch {
	case ev.ChannelType == "im":
		conv.Kind = adapter.Direct
	case ev.ChannelType == "" && ev.Type == "message": // not said: ask (app_mention is never in an im)
		if ws.lookups.conversation(ctx, ws, ev.Channel).im {
			conv.Kind = adapter.Direct
		}
	}
	reply := ev.ThreadTS != "" && ev.ThreadTS != ev.TS
	if conv.Kind == adapter.Group && reply && b.Conversations.Scope == adapter.ScopeThread {
		conv.Kind, conv.Thread = adapter.Thread, ev.ThreadTS
	}
	text, mentioned := stripMention(ev.Text, me.user)
	mentioned = mentioned || ev.Type == "app_mention" || (reply && ev.ParentUserID == me.user)
	if conv.Kind == adapter.Thread && !mentioned && !isBot && b.Conversations.Groups == adapter.GroupsMention {
		answered, err := ws.lookups.answeredIn(ctx, ws, me, ev.Channel, ev.ThreadTS)
		if err != nil && transient(err) {
			return adapter.Arrival{}, "", err // read again later
		}
		mentioned = answered // a thread Slack will not show (a missing scope): not answered in
	}
	author := adapter.Author{ID: ev.User, IsBot: isBot}
	if author.ID == "" {
		author.ID = ev.BotID
	}
	if !isBot { // a bot's message is refused whatever its names
		author.DisplayName = ws.lookups.userName(ctx, ws, ev.User)
		if conv.Kind == adapter.Direct {
			conv.Title = author.DisplayName
		} else {
			conv.Title = ws.lookups.conversation(ctx, ws, ev.Channel).name
		}
	}
	return adapter.Arrival{Conversation: conv, Author: author, Mentioned: mentioned}, text, nil
}

// transient reports whether a failed call may work later (a rate limit, Slack unavailable).
func transient(err error) bool {
	var ra *adapter.RetryAfterError
	return errors.As(err, &ra) || profile.AsError(err).Retryable || profile.AsError(err).Code == profile.CodeTargetUnavailable
}

// stripMention removes the bot's mentions (<@U…>, or <@U…|name>) from text, and reports whether
// it had one.
func stripMention(text, botUser string) (string, bool) {
	if botUser == "" || !strings.Contains(text, "<@"+botUser) {
		return text, false
	}
	re := regexp.MustCompile(`<@` + regexp.QuoteMeta(botUser) + `(\|[^>]*)?> ?`)
	if !re.MatchString(text) {
		return text, false
	}
	return strings.TrimSpace(re.ReplaceAllString(text, "")), true
}

// lookups is what a bot's account remembers of Slack: names, conversations, the threads it
// answered in and who started them. Bounded; a failed lookup gives no name (the message still
// passes).
type lookups struct {
	mu       sync.Mutex
	names    map[string]string    // user id -> display name
	convs    map[string]convInfo  // channel id -> what conversations.info said
	threads  map[string]time.Time // channel + thread -> zero: the bot has a message in it; else none, until then
	starters map[string]string    // channel + thread -> the person who started it
}

type convInfo struct {
	name string
	im   bool
}

func newLookups() *lookups {
	return &lookups{names: map[string]string{}, convs: map[string]convInfo{}, threads: map[string]time.Time{}, starters: map[string]string{}}
}

// userName is a person's name to show (users.info: display name, else real name, else handle).
func (l *lookups) userName(ctx context.Context, ws *workspace, user string) string {
	if user == "" {
		return ""
	}
	l.mu.Lock()
	name, ok := l.names[user]
	l.mu.Unlock()
	if ok {
		return name
	}
	var u *slack.User
	if err := ws.call(ctx, "users.info", "", func(ctx context.Context) (err error) { u, err = ws.api.GetUserInfoContext(ctx, user); return err }); err != nil {
		return ""
	}
	name = u.Profile.DisplayName
	if name == "" {
		name = u.RealName
	}
	if name == "" {
		name = u.Name
	}
	l.mu.Lock()
	if len(l.names) >= maxRemembered {
		clear(l.names)
	}
	l.names[user] = name
	l.mu.Unlock()
	return name
}

// conversation is what conversations.info says of a channel: its name (none for an im) and
// whether it is an im.
func (l *lookups) conversation(ctx context.Context, ws *workspace, channel string) convInfo {
	l.mu.Lock()
	ci, ok := l.convs[channel]
	l.mu.Unlock()
	if ok {
		return ci
	}
	var ch *slack.Channel
	if err := ws.call(ctx, "conversations.info", "", func(ctx context.Context) (err error) {
		ch, err = ws.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: channel})
		return err
	}); err != nil {
		return convInfo{im: strings.HasPrefix(channel, "D")} // unknown: Slack's im ids start with D
	}
	ci = convInfo{name: ch.Name, im: ch.IsIM}
	l.mu.Lock()
	if len(l.convs) >= maxRemembered {
		clear(l.convs)
	}
	l.convs[channel] = ci
	l.mu.Unlock()
	return ci
}

// answeredIn reports whether the bot has a message in a thread: remembered, else read from
// Slack (conversations.replies, the thread's first threadLookup messages), so the rule holds
// across restarts.
func (l *lookups) answeredIn(ctx context.Context, ws *workspace, me identity, channel, thread string) (bool, error) {
	key := channel + "\x00" + thread
	l.mu.Lock()
	until, ok := l.threads[key]
	l.mu.Unlock()
	switch {
	case ok && until.IsZero():
		return true, nil
	case ok && time.Now().Before(until):
		return false, nil
	}
	var msgs []slack.Message
	if err := ws.call(ctx, "conversations.replies", channel, func(ctx context.Context) (err error) {
		msgs, _, _, err = ws.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: thread, Limit: threadLookup})
		return err
	}); err != nil {
		return false, err
	}
	found := false
	for _, m := range msgs {
		if m.User == me.user || (m.BotID != "" && m.BotID == me.bot) {
			found = true
			break
		}
	}
	l.mu.Lock()
	if len(l.threads) >= maxRemembered {
		clear(l.threads)
	}
	if found {
		l.threads[key] = time.Time{}
	} else {
		l.threads[key] = time.Now().Add(unansweredFor)
	}
	l.mu.Unlock()
	return found, nil
}

// threadStarter is the person whose message started a thread (conversations.replies: the
// parent comes first); "" when a bot started it or it cannot be read.
func (l *lookups) threadStarter(ctx context.Context, ws *workspace, channel, thread string) string {
	key := channel + "\x00" + thread
	l.mu.Lock()
	user, ok := l.starters[key]
	l.mu.Unlock()
	if ok {
		return user
	}
	var msgs []slack.Message
	if err := ws.call(ctx, "conversations.replies", channel, func(ctx context.Context) (err error) {
		msgs, _, _, err = ws.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: thread, Limit: 1})
		return err
	}); err != nil || len(msgs) == 0 {
		return ""
	}
	if msgs[0].BotID == "" {
		user = msgs[0].User
	}
	l.mu.Lock()
	if len(l.starters) >= maxRemembered {
		clear(l.starters)
	}
	l.starters[key] = user
	l.mu.Unlock()
	return user
}

// answered remembers that the bot has a message in a thread.
func (l *lookups) answered(channel, thread string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.threads) >= maxRemembered {
		clear(l.threads)
	}
	l.threads[channel+"\x00"+thread] = time.Time{}
}

// forget drops what is believed of a thread the bot has no message in (a message to the bot
// there was admitted: its answer is coming).
func (l *lookups) forget(channel, thread string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until, ok := l.threads[channel+"\x00"+thread]; ok && !until.IsZero() {
		delete(l.threads, channel+"\x00"+thread)
	}
}
