package bus

import (
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/subjects"
)

// HeaderUUID is the NATS header carrying the Watermill message UUID.
const HeaderUUID = "Xim-Uuid"

// Metadata keys set by the subscriber on every received message (defined in subjects, so that
// the stages read them without importing the bus). They replace NATS headers of the same name.
const (
	// MetaStream is the name of the stream the message was read from.
	MetaStream = subjects.MetaStream
	// MetaSubject is the subject the message is stored under (after any subject transform), e.g.
	// "xim.part.3.<channel>.<kind>".
	MetaSubject = subjects.MetaSubject
	// MetaStreamSeq is the message's stream sequence, in decimal.
	MetaStreamSeq = subjects.MetaStreamSeq
	// MetaNumDelivered is the message's delivery count, in decimal: JetStream's (which also
	// counts a delivery to a subscriber that fetched the message and handed it back on Close)
	// plus the in-process redeliveries after Nack. "1" on the first delivery; above 1 the message
	// may have been seen before, by this or another subscriber.
	MetaNumDelivered = subjects.MetaNumDelivered
)

// headerMsgID is JetStream's de-duplication header.
const headerMsgID = "Nats-Msg-Id"

// errUnconvertible marks a received NATS message that cannot become a Watermill message.
var errUnconvertible = errors.New("unconvertible message")

// headerValueReplacer replaces what a NATS header value cannot hold, as nats.go does on the wire.
var headerValueReplacer = strings.NewReplacer("\r", " ", "\n", " ")

// headerValue returns v as it arrives after a trip through NATS headers: surrounding ASCII
// whitespace trimmed, CR and LF replaced by spaces.
func headerValue(v string) string {
	return headerValueReplacer.Replace(textproto.TrimString(v))
}

// validHeaderKey reports whether k is a NATS header name: printable ASCII without spaces and
// without any of "()/,:;<=>?@[\]{}.
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// metadataToHeader builds the NATS headers of a message: one header per metadata entry (key
// unchanged, value as [headerValue] returns it) and [HeaderUUID]. A key that is not a valid
// header name is an error wrapping [ErrInvalidMetadata].
func metadataToHeader(uuid string, md message.Metadata) (nats.Header, error) {
	h := make(nats.Header, len(md)+2)
	for k, v := range md {
		if !validHeaderKey(k) {
			return nil, fmt.Errorf("%w: key %q is not a NATS header name", ErrInvalidMetadata, k)
		}
		h[k] = []string{headerValue(v)}
	}
	h[HeaderUUID] = []string{headerValue(uuid)}
	return h, nil
}

// headerToMetadata turns NATS headers into Watermill metadata. A header with more than one value
// cannot be represented and is an error wrapping errUnconvertible.
func headerToMetadata(h nats.Header) (message.Metadata, error) {
	md := make(message.Metadata, len(h)+4)
	for k, vs := range h {
		switch len(vs) {
		case 0:
			md[k] = ""
		case 1:
			md[k] = vs[0]
		default:
			return nil, fmt.Errorf("%w: header %q has %d values", errUnconvertible, k, len(vs))
		}
	}
	return md, nil
}

// delivery is a received JetStream message converted once, emitted as a fresh Watermill message
// on each (re)delivery to the handler.
type delivery struct {
	uuid     string
	metadata message.Metadata
	payload  []byte
	stream   string
	seq      uint64
	// cseq is the consumer's delivery sequence (every delivery, redeliveries included, takes
	// the next one).
	cseq         uint64
	numDelivered uint64
}

// convert turns a received JetStream message into a delivery. The stream sequence is returned
// even on error when it could be read (0 otherwise), for the log.
func convert(m jetstream.Msg) (delivery, error) {
	meta, err := m.Metadata()
	if err != nil {
		return delivery{}, fmt.Errorf("%w: %w", errUnconvertible, err)
	}
	d := delivery{
		payload:      m.Data(),
		stream:       meta.Stream,
		seq:          meta.Sequence.Stream,
		cseq:         meta.Sequence.Consumer,
		numDelivered: meta.NumDelivered,
	}
	md, err := headerToMetadata(m.Headers())
	if err != nil {
		return d, err
	}
	md[MetaStream] = meta.Stream
	md[MetaSubject] = m.Subject()
	md[MetaStreamSeq] = strconv.FormatUint(meta.Sequence.Stream, 10)
	d.metadata = md
	switch {
	case md[HeaderUUID] != "":
		d.uuid = md[HeaderUUID]
	case md[headerMsgID] != "":
		d.uuid = md[headerMsgID]
	default:
		d.uuid = meta.Stream + ":" + md[MetaStreamSeq]
	}
	return d, nil
}
