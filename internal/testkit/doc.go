// Package testkit holds the real parts the end-to-end tests, the load tool and ximctl drive: an
// in-process ximd node on loopback ports with an embedded JetStream server, a loopback webhook
// target that records every call and checks its signature, and an xAgent WebSocket client.
package testkit
