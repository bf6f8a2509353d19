package subjects

// Names of the webchat target's state (handlers/adapter/webchat). The webchat "target system" is
// a JetStream stream: the worker-side adapter publishes the state of each chat message (and the
// channel's activity status) to its own subject, and gateways stream those subjects to the
// channel's browser pages. With one message kept per subject, the stream holds the latest state
// of every message: the channel's history.
const (
	// StreamWebchat holds the webchat channels' messages and status.
	StreamWebchat = "XIM_WEBCHAT"
	// WebchatAll matches every subject of StreamWebchat.
	WebchatAll = webchatRoot + ".*.*"
	// ConfigWebchatKey is the key in BucketConfig holding the key that derives webchat page
	// secrets (shared by every gateway).
	ConfigWebchatKey = "webchat-link-key"

	webchatRoot = "xim.webchat"
	// webchatStatus is the item token of a channel's activity status.
	webchatStatus = "status"
)

// WebchatItem is the subject of one item (a message's target id, or the status) of a webchat
// channel: "xim.webchat.<channel>.<item>".
func WebchatItem(channel, item string) (string, error) {
	if err := tokens(channel, item); err != nil {
		return "", err
	}
	return webchatRoot + "." + channel + "." + item, nil
}

// WebchatStatus is the subject of a webchat channel's activity status.
func WebchatStatus(channel string) (string, error) {
	return WebchatItem(channel, webchatStatus)
}

// WebchatChannel matches every item of one webchat channel (for its page and for purges).
func WebchatChannel(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return webchatRoot + "." + channel + ".*", nil
}
