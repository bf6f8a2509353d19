# nats-server as a FROM-scratch image, built from the Go module ximd already depends on, for
# machines that cannot pull the official image (NATS_IMAGE selects which one compose uses).
FROM scratch
COPY build/nats-server /nats-server
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
