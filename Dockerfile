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
# RUNTIME_SUBDIRECTORY, PORT, REDIS_URL, ...). No rules are baked in, as
# in the reference's image: /srv/runtime_data/current/config, the
# reference's default rules directory, is empty. Mount a directory of
# rules there, or point RUNTIME_ROOT (with RUNTIME_SUBDIRECTORY) or
# --config at it (a directory, not single files, so that edits and
# ConfigMap updates reach the watcher). A mount at the wrong path leaves
# the directory empty: FastLimit says so at startup, and with
# HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true health stays failed.

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
# One binary under both names: /bin/ratelimit, and /fastlimit linking to it;
# and the reference's default rules directory, empty.
RUN mkdir -p /out/bin /out/srv/runtime_data/current/config && mv /fastlimit /out/bin/ratelimit && ln -s bin/ratelimit /out/fastlimit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /
# The default --config, "config", is the reference's default rules
# directory from here.
WORKDIR /srv/runtime_data/current
USER 65532:65532
# 8080: HTTP (/healthcheck, /ready, /json); 8081: gRPC (Envoy's rate limit
# service). The admin listener (/metrics) binds 127.0.0.1:6070 unless
# ADMIN_ADDR (or DEBUG_HOST and DEBUG_PORT) says otherwise.
EXPOSE 8080 8081
ENTRYPOINT ["/bin/ratelimit"]
