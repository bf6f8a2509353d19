// Package faultkit is the harness of the fault suites in test/ (fault_test.go, cluster_test.go):
// real processes (ximd, nats-server) started from binaries built from this checkout and killed
// or stopped on purpose, an xAgent player that keeps every final pending until a terminal ack and
// retransmits it across reconnects (P-ACK-3, P-STATE-1/2), a target platform that re-posts user
// messages until ximd answers 202, and the checks run on what the webhook target and the player
// saw: no final shown twice, none lost, no pending user message lost, no stuck typing indicator,
// and streamed text that only grows.
package faultkit
