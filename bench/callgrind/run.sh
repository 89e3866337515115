#!/usr/bin/env bash
# Redis instructions per decision, counted by valgrind's callgrind.
#   bench/callgrind/run.sh take 20    # take.lua calls of 20 decisions
#   bench/callgrind/run.sh ref 1      # the reference's INCRBY+EXPIRE
#   ALG=sliding IDS=1000 bench/callgrind/run.sh take 64
# ALG: fixed (default), sliding or bucket; IDS: identifiers the keys are
# drawn from (default 100000; 1 is a hot key); windows of a minute.
# Needs redis-server, redis-cli and valgrind (Debian: redis-server,
# redis-tools, valgrind). Prints instructions per decision: the server's
# total for the stream, less its total for an empty stream, over the
# decisions. Deterministic for a given redis-server and input (but for a
# minute that turns during the stream).
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-take}; n=${2:-20}; calls=${CALLS:-500}; alg=${ALG:-fixed}; ids=${IDS:-100000}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gen" ./bench/callgrind
go run ./bench/callgrind/script > "$tmp/take.lua"
port=$(( 20000 + RANDOM % 20000 ))
count() { # $1: "" for an empty stream
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
    redis-server --port "$port" --save '' --appendonly no >"$tmp/log" 2>&1 &
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$tmp/take.lua")")
  if [ -n "$1" ]; then
    "$tmp/gen" -mode "$mode" -calls "$calls" -n "$n" -sha "$sha" -alg "$alg" -keys "$ids" | redis-cli -p "$port" --pipe >"$tmp/pipe"
    grep -q "errors: 0" "$tmp/pipe" || { echo "errors from redis-server:" >&2; grep -m3 ERR "$tmp/pipe" >&2; exit 1; }
  fi
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait
  grep -o 'Collected : [0-9]*' "$tmp/log" | awk '{print $3}'
}
base=$(count ""); total=$(count x)
echo "$mode $alg, $ids identifiers, $n decisions a call: $(( (total - base) / (calls * n) )) instructions a decision"
