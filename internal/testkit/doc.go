// Package testkit holds the real parts end-to-end tests and the load tool drive: an in-process
// ximd node on loopback ports with an embedded JetStream server, a loopback webhook target that
// records every call and checks its signature, and an xAgent WebSocket client.
package testkit
