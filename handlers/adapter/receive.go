package adapter

import (
	"errors"
	"io"
	"net/http"

	"github.com/ximd/ximd/profile"
)

// Receiver is optional: an adapter whose platform calls ximd with its users' messages (the
// webhook target's posts, an event subscription). The gateway routes
// POST /v1/targets/{adapter}/{channel}/{path...} to it, without the bearer token, with the body
// bounded by XIM_MAX_PACKET_BYTES and read under XIM_BODY_TIMEOUT, at most
// XIM_MAX_INBOUND_REQUESTS at once.
type Receiver interface {
	// Receive handles a request for ch, an open channel of the adapter: it checks the
	// platform's signature with ch's config, submits what the request carries through the
	// inbox of the channel it belongs to (ch's own, or, for a platform that calls one URL for a
	// whole account, one of in.Channels()), and writes the answer. It returns the outcome for
	// the metrics ([Accepted], [Duplicate], [Ignored], ...); a refusal is returned as a
	// *profile.Error instead, which the gateway writes.
	Receive(w http.ResponseWriter, r *http.Request, ch Channel, in Inboxes) (Received, error)
	// Refusal answers a request for a channel that is not open on this adapter exactly as a
	// bad signature is answered, so the route tells nobody without a secret which channels exist.
	Refusal() error
}

// ReadBody is the receive prologue: the body of a request the gateway routed to a [Receiver]
// (bounded by XIM_MAX_PACKET_BYTES). A body past the bound is a *profile.Error
// packet_too_large, another failure to read it bad_request.
func ReadBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, profile.Errorf(profile.CodePacketTooLarge, "body exceeds %d bytes", tooLarge.Limit)
		}
		return nil, profile.Errorf(profile.CodeBadRequest, "body: %v", err)
	}
	return body, nil
}

// Route is what a [Receiver] serves under each of its channels, for [Kit.StartReceive].
type Route[C any] struct {
	// Path is the route's last segment: POST /v1/targets/{adapter}/{channel}/{Path}.
	Path string
	// Accept checks the request against the channel's config before the body is read: the
	// config takes this route, the request carries the channel's secret. nil accepts.
	Accept func(r *http.Request, c C) bool
	// Refusal answers a request whose channel config does not parse or that Accept refuses:
	// the adapter's Refusal, so a refused request tells nothing of which channels exist.
	Refusal error
}

// StartReceive is the receive prologue of a [Receiver]: another path than rt.Path is
// not_found; ch's config is parsed and accepted, else the request is answered rt.Refusal, before
// anything of the body is read; then the body is read ([ReadBody]).
func (k Kit[C, P]) StartReceive(r *http.Request, ch Channel, rt Route[C]) (c C, body []byte, err error) {
	if r.PathValue("path") != rt.Path {
		return c, nil, profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	if c, err = k.parse(ch.Target.Config); err != nil || (rt.Accept != nil && !rt.Accept(r, c)) {
		return c, nil, rt.Refusal
	}
	body, err = ReadBody(r)
	return c, body, err
}

// BotReceiver is optional for a [Receiver] that takes bots: the gateway routes
// POST /v1/targets/{adapter}/bots/{bot_id}/{path...} (the platform's calls for a bot's whole
// account) to it, as Receive's route, for b, a bot of the adapter.
type BotReceiver interface {
	// ReceiveBot checks the platform's signature with b's config, admits each message it
	// carries through in (Admit: the message's conversation finds or opens its channel, or is
	// refused by b's policy) and writes the answer. It returns the outcome for the metrics; a
	// refusal of the request is returned as a *profile.Error, which the gateway writes.
	ReceiveBot(w http.ResponseWriter, r *http.Request, b Bot, in Inboxes) (Received, error)
}
