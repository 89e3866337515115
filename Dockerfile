# syntax=docker/dockerfile:1

# FastLimit image: a static binary on distroless, running as nonroot.
#
#   docker build -t fastlimit --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm -p 8080:8080 -p 8081:8081 fastlimit
#   docker run --rm -v "$PWD/rules:/etc/fastlimit/rules:ro" fastlimit check --config /etc/fastlimit/rules
#
# The image carries examples/envoy/rules as its default rules; mount a
# directory of your own over /etc/fastlimit/rules (a directory, not single
# files, so that edits and ConfigMap updates reach the watcher).

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

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /fastlimit /fastlimit
COPY examples/envoy/rules/ /etc/fastlimit/rules/
USER nonroot:nonroot
# 8080: HTTP (/healthcheck, /ready, /json); 8081: gRPC (Envoy's rate limit
# service). The admin listener (/metrics) binds 127.0.0.1:6070 unless
# ADMIN_ADDR says otherwise.
EXPOSE 8080 8081
ENTRYPOINT ["/fastlimit"]
CMD ["--config", "/etc/fastlimit/rules"]
