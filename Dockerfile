# ximd as a FROM-scratch image from a static binary built on the host (no base image to pull):
#   CGO_ENABLED=0 go build -trimpath -o build/ximd ./cmd/ximd && docker build -t ximd:local .
# test/compose/run does both.
FROM scratch
COPY build/ximd /ximd
ENV XIM_HTTP_ADDR=0.0.0.0:8080 XIM_DATA_DIR=/data XIM_LOG_FORMAT=json
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/ximd"]
