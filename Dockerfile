# syntax=docker/dockerfile:1

# FastLimit image: a static binary on distroless, running as the numeric
# non-root user 65532.
#
#   docker build -t fastlimit --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm -p 8080:8080 -p 8081:8081 fastlimit
#   docker run --rm -v "$PWD/rules:/rules:ro" fastlimit check --config /rules
#
# A drop-in for envoyproxy/ratelimit's image: the binary is /bin/ratelimit
# (Envoy Gateway starts that path), also reachable as /fastlimit, and with
# no flags it reads the reference's environment (RUNTIME_ROOT,
# RUNTIME_SUBDIRECTORY, PORT, REDIS_URL, ...). With nothing set it loads
# the shipped rules (examples/envoy/rules) from
# /srv/runtime_data/current/config, the reference's default rules
# directory; mount a directory of your own there, or point RUNTIME_ROOT
# or --config elsewhere (a directory, not single files, so that edits and
# ConfigMap updates reach the watcher).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=${VERSION}" -o /fastlimit ./cmd/server
# One binary under both names: /bin/ratelimit, and /fastlimit linking to it.
RUN mkdir -p /out/bin && mv /fastlimit /out/bin/ratelimit && ln -s bin/ratelimit /out/fastlimit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /
COPY examples/envoy/rules/ /srv/runtime_data/current/config/
# The default --config, "config", is the reference's default rules
# directory from here.
WORKDIR /srv/runtime_data/current
USER 65532:65532
# 8080: HTTP (/healthcheck, /ready, /json); 8081: gRPC (Envoy's rate limit
# service). The admin listener (/metrics) binds 127.0.0.1:6070 unless
# ADMIN_ADDR (or DEBUG_HOST and DEBUG_PORT) says otherwise.
EXPOSE 8080 8081
ENTRYPOINT ["/bin/ratelimit"]
