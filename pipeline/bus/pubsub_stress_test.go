//go:build stress

package bus_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

// TestPubSubStress runs the universal suite STRESS_TEST_COUNT times (default 10) in parallel on
// one server: go test -tags stress -run TestPubSubStress ./pipeline/bus/
func TestPubSubStress(t *testing.T) {
	newPubSub := suiteConstructor(t)
	tests.TestPubSubStressTest(t, suiteFeatures,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, "") },
		newPubSub,
	)
}
