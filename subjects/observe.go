package subjects

// Subjects an observer (ximctl tail) subscribes to with plain core NATS subscriptions: they see
// packets as they pass and take nothing from any stream or consumer.

// ReplyAll matches the reply subjects of every gateway (acks and error packets to xAgent).
const ReplyAll = gwRoot + ".*.reply"

// InChannel matches every inbound subject of one channel, whatever the packet kind.
func InChannel(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return inRoot + "." + channel + ".*", nil
}
