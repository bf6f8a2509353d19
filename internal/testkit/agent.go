package testkit

import "github.com/ximd/ximd/pipeline/xagent"

// Agent plays xAgent over /v1/ws in tests (pipeline/xagent).
type Agent = xagent.Client

// The xagent helpers, under the names the suites use.
var (
	Dial    = xagent.Dial
	Packet  = xagent.Packet
	AckOf   = xagent.AckOf
	ErrorOf = xagent.ErrorOf
	NewID   = xagent.NewID
)
