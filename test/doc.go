// Package test holds ximd's cross-package end-to-end suites: each test runs a real node (embedded
// JetStream, HTTP and WebSocket on loopback) against a real loopback webhook target, and is named
// after the edge-api or profile rule it proves. Shared parts are in internal/testkit (which the
// operator's tool, ximctl, uses too) and, for the fault suites, test/faultkit.
package test
