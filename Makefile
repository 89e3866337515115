# FastLimit developer targets. The README's two commands need none of this:
# `go run ./cmd/server` and `./scripts/test.sh`.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.Version=$(VERSION)

.PHONY: help build run test lint bench e2e
help: ## list targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'
build: ## build bin/fastlimit
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/fastlimit ./cmd/server
run: ## run on the embedded store with the shipped rules
	go run ./cmd/server --log-format console
test: ## every test, as CI runs them
	./scripts/test.sh
lint: ## gofmt, vet, tidy check
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...
	go mod tidy -diff
bench: ## load scenarios into BENCHMARKS.md (~6 min; COMPARE=path/to/service_cmd adds the reference, ~11 min)
	go run ./bench/rls $(if $(COMPARE),--compare $(COMPARE))
e2e: ## end-to-end tests only
	go test -count=1 ./e2e/
