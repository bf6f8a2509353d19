// Package pipeline holds ximd's NATS side: the embedded nats-server (or a connection to an
// external cluster), idempotent provisioning of every stream, KV bucket and consumer, and the
// Watermill router with its middleware (recoverer, bounded retry, poison). Sub-packages: bus
// (Watermill Publisher/Subscriber on JetStream), channels (the channel registry), files (the
// Transfer Plane), edge (the HTTP/WebSocket edge) and node (assembles a process of a role).
package pipeline
