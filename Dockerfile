# ximd as a FROM-scratch image from a static binary built on the host (no base image to pull):
#   mkdir -p build/data && CGO_ENABLED=0 go build -trimpath -o build/ximd ./cmd/ximd && docker build -t ximd:local .
# test/compose/run does both.
# It runs as an unprivileged user (65534, "nobody"); /data (an empty directory: mkdir -p
# build/data) is that user's, and so is a named volume mounted there.
FROM scratch
COPY build/ximd /ximd
COPY --chown=65534:65534 build/data /data
USER 65534:65534
ENV XIM_HTTP_ADDR=0.0.0.0:8080 XIM_DATA_DIR=/data XIM_LOG_FORMAT=json
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/ximd"]
