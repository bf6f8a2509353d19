package handlers

import (
	"github.com/ximd/ximd/profile"
)

// Packet is a validated inbound packet: exactly one of its payload fields is set.
type Packet struct {
	Envelope profile.Envelope
	Message  *profile.Message
	Delta    *profile.Delta
	Activity *profile.Activity
	Ack      *profile.Ack
}

// Rejection is how an invalid packet is answered: an ack for a chat.message whose message_id
// could be read (edge-api §5.1), otherwise an `error` packet.
type Rejection struct {
	Err       *profile.Error
	MessageID string // non-empty: answer with a rejected chat.message.ack
}

// Validate checks a stored packet's payload against the catalog (P-ID-2, P-MSG-3..8, P-DLT-1/5,
// P-ACT-1..3). It never looks at state: that is the later stages' job.
func Validate(cat *profile.Catalog, env profile.Envelope) (Packet, *Rejection) {
	p := Packet{Envelope: env}
	var err error
	switch env.Type {
	case profile.TypeMessage:
		var m profile.Message
		if m, err = cat.DecodeMessage(env.Payload, profile.FromAgent); err == nil {
			p.Message = &m
		} else if id := profile.MessageIDOf(env.Payload); id != "" {
			return p, &Rejection{Err: profile.AsError(err), MessageID: id}
		}
	case profile.TypeDelta:
		var d profile.Delta
		if d, err = cat.DecodeDelta(env.Payload); err == nil {
			p.Delta = &d
		}
	case profile.TypeActivity:
		var a profile.Activity
		if a, err = cat.DecodeActivity(env.Payload); err == nil {
			p.Activity = &a
		}
	case profile.TypeAck:
		var a profile.Ack
		if a, err = cat.DecodeAck(env.Payload); err == nil {
			p.Ack = &a
		}
	default:
		err = profile.Errorf(profile.CodeInvalidPacket, "type %s has no stage", env.Type)
	}
	if err != nil {
		return p, &Rejection{Err: profile.AsError(err)}
	}
	return p, nil
}
