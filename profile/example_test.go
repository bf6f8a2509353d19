package profile_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ximd/ximd/profile"
)

// A gateway/worker receiving one WebSocket frame from xAgent (edge-api §5).
func ExampleDecodeEnvelope() {
	frame := []byte(`{"schema":"xagent.connector.packet/v1","packet_id":"pkt_message_1",
	  "connector_channel_id":"cch_123","type":"chat.message","time":1790000000000,
	  "payload":{"message_id":"msg_1","text":"Summarise the current page",
	    "files":[{"type":"image","file_ref":"file_abc123","filename":"page.png"}]}}`)

	env, err := profile.DecodeEnvelope(frame)
	if err != nil {
		fmt.Println("error packet:", err) // reply_to = env.PacketID when set
		return
	}
	cat := profile.Default()
	pt, ok := cat.Accepts(profile.FromAgent, env.Type)
	if !ok {
		return // outside the catalog: dropped silently (P-ERR-1)
	}
	fmt.Println(pt.Kind, pt.NeedsAck, profile.ValidChannelID(env.ChannelID))

	msg, err := cat.DecodeMessage(env.Payload, profile.FromAgent)
	if err != nil {
		var pe *profile.Error
		errors.As(err, &pe)
		fmt.Println(profile.Rejected(profile.MessageIDOf(env.Payload), pe))
		return
	}
	fmt.Println(msg.MessageID, msg.Text, msg.Files[0].Type, msg.Files[0].FileRef)
	// Output:
	// message true true
	// msg_1 Summarise the current page image file_abc123
}

// An invalid chat.message is answered by a rejected ack naming the field (edge-api §5.1).
func ExampleCatalog_DecodeMessage() {
	payload := json.RawMessage(`{"message_id":"msg_2","files":[{"type":"image","file_ref":"a"},{"type":"pdf","file_ref":"b"}]}`)

	_, err := profile.Default().DecodeMessage(payload, profile.FromAgent)
	ack := profile.Rejected(profile.MessageIDOf(payload), profile.AsError(err))
	b, _ := json.Marshal(ack)
	fmt.Println(string(b))
	// Output:
	// {"message_id":"msg_2","status":"rejected","code":"invalid_packet","message":"files[1].type: must be one of image, video, audio, file (P-MSG-4)","retryable":false}
}

// Building the `error` packet for an unknown channel (edge-api §5 step 3).
func ExampleNewPacket() {
	in := profile.Envelope{PacketID: "pkt_7", ChannelID: "cch_gone"}
	e := profile.Errorf(profile.CodeChannelNotOpen, "channel %s is not open", in.ChannelID)
	pkt, err := profile.NewPacket(in.ChannelID, profile.TypeError, in.PacketID, profile.ErrorPayloadOf(e))
	if err != nil {
		panic(err)
	}
	fmt.Println(pkt.Type, pkt.ReplyTo, string(pkt.Payload))
	// Output:
	// error pkt_7 {"code":"channel_not_open","message":"channel cch_gone is not open","retryable":false}
}

func ExampleCatalog_Accepts() {
	cat := profile.Default()
	for _, typ := range []string{"chat.message.delta", "session.sync_request"} {
		_, ok := cat.Accepts(profile.FromAgent, typ)
		fmt.Println(typ, ok)
	}
	fmt.Println(cat.Emits("chat.message.delta"))
	// Output:
	// chat.message.delta true
	// session.sync_request false
	// false
}

func ExampleMessage_Digest() {
	a := profile.Message{MessageID: "m1", Text: "hi", CreatedAt: 1}
	b := profile.Message{MessageID: "m1", Text: "hi", CreatedAt: 2}
	c := profile.Message{MessageID: "m1", Text: "hi!"}
	fmt.Println(a.Digest() == b.Digest(), a.Digest() == c.Digest())
	// Output: true false
}
