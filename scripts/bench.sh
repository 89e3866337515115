#!/usr/bin/env bash
# bench.sh: FastLimit's benchmark, in one run (about 10 minutes).
#
# Builds the server and cmd/loadgen, starts its own redis-server on a free
# loopback port (no persistence, own temp dir) and measures, over gRPC:
#   - the `unlimited` rule (the gRPC floor: no store), the embedded store,
#     and single Redis with fixed window, sliding window and token bucket;
#     1 and 3 descriptors per request; 1 and 64 callers;
#   - Redis' own ceiling: redis-benchmark EVALSHA of lua/fixed_window.lua,
#     without and with pipelining (-P 16);
#   - Redis memory per tracked identifier for each algorithm, and proof
#     that keys disappear once their window is over;
#   - the server's RSS with the embedded store at 1M identifiers, and that
#     it stops growing once the janitor has swept expired state;
#   - the Go micro-benchmarks (Match, AppendKey, Check, store Take).
# It writes the tables into BENCHMARKS.md, between the bench.sh markers
# (text outside them is kept), prints them, and keeps raw results
# (loadgen JSON, CPU profiles) in .tmp/bench/.
#
# Usage: scripts/bench.sh          (or: make bench)
# Settings (environment):
#   BENCH_DURATION=10s   measured time per load scenario
#   BENCH_WARMUP=1s      unmeasured load before each scenario
#   BENCH_CALLERS=64     callers of the concurrent scenarios
#   BENCH_CONNS=4        gRPC connections the callers share
#   BENCH_KEYS=10000     identifiers per scenario (uniform draws)
#   BENCH_REDIS_N=200000 requests per redis-benchmark run (x5 pipelined)
#   BENCH_MEM_IDS=100000 identifiers per Redis memory measurement
#   BENCH_RSS_IDS=1000000 identifiers per embedded-store RSS round (0: skip)
#   BENCH_RSS_CYCLES=2   rounds of new 1-second identifiers, each followed
#                        by the janitor's sweep
#   BENCH_SWEEP=10       the memory store's sweep interval, seconds
#                        (--memory-sweep-interval of the RSS server)
#   BENCH_GO=1           run the Go benchmarks (0: skip)
#   BENCH_GOTIME=1s      -benchtime of the Go benchmarks
#   BENCH_PROFILE=1      CPU profiles of the server under load, if it has --pprof
#   BENCH_BATCHES=2      --redis-batches of the runs on go-redis' pool
#                        (--redis-conns 0), when the server has the flags
#                        (0: skip them)
#   BENCH_CACHE=16777216 --local-cache-size-in-bytes of the over-limit run
#                        with the cache (0: skip the over-limit runs)
#   BENCH_OUT=BENCHMARKS.md
#   BENCH_SERVER_FLAGS="--store-timeout 1s"  extra server flags: a generous
#                        store timeout, so that a machine starved by other
#                        work shows up as latency rather than as Unavailable
#                        answers and an open circuit breaker
# Everything listens on 127.0.0.1 only.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-1s}
CALLERS=${BENCH_CALLERS:-64}
CONNS=${BENCH_CONNS:-4}
KEYS=${BENCH_KEYS:-10000}
REDIS_N=${BENCH_REDIS_N:-200000}
MEM_IDS=${BENCH_MEM_IDS:-100000}
RSS_IDS=${BENCH_RSS_IDS:-1000000}
RSS_CYCLES=${BENCH_RSS_CYCLES:-2}
SWEEP=${BENCH_SWEEP:-10}
GO_BENCH=${BENCH_GO:-1}
GO_BENCHTIME=${BENCH_GOTIME:-1s}
PROFILE=${BENCH_PROFILE:-1}
BATCHES=${BENCH_BATCHES:-2}
CACHE=${BENCH_CACHE:-16777216}
OUT=${BENCH_OUT:-BENCHMARKS.md}
read -r -a EXTRA_FLAGS <<<"${BENCH_SERVER_FLAGS-"--store-timeout 1s"}"

# On a fresh Debian machine, install what is missing (as scripts/test.sh does).
if ! command -v jq >/dev/null || ! command -v curl >/dev/null || ! command -v redis-benchmark >/dev/null ||
	! command -v redis-server >/dev/null; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq jq curl redis-server redis-tools >/dev/null
fi
for tool in go jq curl redis-server redis-cli redis-benchmark; do
	command -v "$tool" >/dev/null || { echo "bench.sh: $tool not found on PATH" >&2; exit 1; }
done

START=$(date +%s)
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fastlimit-bench.XXXXXX")
RES=$ROOT/.tmp/bench
rm -rf "$RES"
mkdir -p "$RES"
PIDS=()

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[bench %3ds] %s\n' $(($(date +%s) - START)) "$*" >&2; }

# free_port prints a loopback port nobody listens on (nor was handed out).
USED_PORTS=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		[[ $USED_PORTS == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			USED_PORTS+="$p "
			echo "$p"
			return
		fi
	done
}

# cpu_ticks PID prints the process's user+system CPU time in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
CLK_TCK=$(getconf CLK_TCK)

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# secs DURATION prints a Go-style duration (500ms, 10s, 2m) in seconds.
secs() {
	case $1 in
	*ms) awk -v v="${1%ms}" 'BEGIN {print v / 1000}' ;;
	*s) echo "${1%s}" ;;
	*m) awk -v v="${1%m}" 'BEGIN {print v * 60}' ;;
	*) echo "$1" ;;
	esac
}

# ---------------------------------------------------------------- build
log "building the server and loadgen"
BIN=$TMP/bin
mkdir -p "$BIN"
VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
go build -trimpath -ldflags "-X main.Version=$VERSION" -o "$BIN/fastlimit" ./cmd/server
go build -trimpath -o "$BIN/loadgen" ./cmd/loadgen
SERVER_FLAGS=$("$BIN/fastlimit" -h 2>&1 || true)
has_flag() { grep -q -- "-$1\b" <<<"$SERVER_FLAGS"; }
"$BIN/fastlimit" check --config bench/rules >/dev/null

# ---------------------------------------------------------------- redis
REDIS_PORT=$(free_port)
mkdir -p "$TMP/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$TMP/redis" --logfile "$TMP/redis/redis.log" --daemonize no >/dev/null 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
for _ in $(seq 100); do
	[[ $(rcli PING 2>/dev/null) == PONG ]] && break
	sleep 0.05
done
[[ $(rcli PING) == PONG ]] || { echo "bench.sh: redis-server did not start" >&2; exit 1; }
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
REDIS_VERSION=$(rcli INFO server | tr -d '\r' | awk -F: '/^redis_version:/ {print $2}')
log "redis-server $REDIS_VERSION on 127.0.0.1:$REDIS_PORT"

# ---------------------------------------------------------------- server
# start_server NAME [flags...] starts the server on free loopback ports and
# waits until /healthcheck answers. It sets SRV_PID, SRV_GRPC, SRV_ADMIN,
# SRV_LAUNCH and SRV_READY (Unix seconds, fractional).
start_server() {
	local name=$1
	shift
	local grpc http extra=()
	grpc=$(free_port)
	http=$(free_port)
	SRV_ADMIN=
	if has_flag drain; then
		extra+=(--drain 0s) # stop at once between runs
	fi
	if has_flag admin-addr; then
		SRV_ADMIN=127.0.0.1:$(free_port)
		extra+=(--admin-addr "$SRV_ADMIN")
		if [[ $PROFILE == 1 ]] && has_flag pprof; then
			extra+=(--pprof)
		fi
	fi
	SRV_LAUNCH=$(date +%s.%N)
	"$BIN/fastlimit" --config bench/rules --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
		--log-level warn "${extra[@]}" "${EXTRA_FLAGS[@]}" "$@" >"$RES/server-$name.log" 2>&1 &
	SRV_PID=$!
	PIDS+=("$SRV_PID")
	SRV_GRPC=127.0.0.1:$grpc
	for _ in $(seq 200); do
		curl -sf "http://127.0.0.1:$http/healthcheck" >/dev/null 2>&1 && break
		kill -0 "$SRV_PID" 2>/dev/null || { cat "$RES/server-$name.log" >&2; exit 1; }
		sleep 0.05
	done
	curl -sf "http://127.0.0.1:$http/healthcheck" >/dev/null || { echo "bench.sh: server $name not healthy" >&2; exit 1; }
	SRV_READY=$(date +%s.%N)
	log "server $name (pid $SRV_PID) on $SRV_GRPC ${EXTRA_FLAGS[*]} $*"
}

# stop_server stops the current server and forgets its PID, so that
# cleanup never signals a PID the system may have reused.
stop_server() {
	kill "$SRV_PID" 2>/dev/null || true
	wait "$SRV_PID" 2>/dev/null || true
	local keep=() pid
	for pid in "${PIDS[@]}"; do
		[[ $pid == "$SRV_PID" ]] || keep+=("$pid")
	done
	PIDS=("${keep[@]}")
}

# ---------------------------------------------------------------- load runs
# Rows of the load table, one JSON object per line.
ROWS=$RES/rows.jsonl
: >"$ROWS"

# scenario LABEL STORE ALG KEY DESCRIPTORS CALLERS [loadgen flags...] runs
# loadgen against the current server and appends a row with the server's,
# Redis' and loadgen's CPU per decision.
scenario() {
	local label=$1 store=$2 alg=$3 key=$4 descs=$5 callers=$6
	shift 6
	local l s0 r0 s1 r1
	l=$(load1)
	s0=$(cpu_ticks "$SRV_PID")
	r0=$(cpu_ticks "$REDIS_PID")
	"$BIN/loadgen" -addr "$SRV_GRPC" -json -c "$callers" -conns "$CONNS" -d "$DURATION" -warmup "$WARMUP" \
		-keys "$KEYS" -domain bench -key "$key" -descriptors "$descs" "$@" >"$RES/$label.json"
	s1=$(cpu_ticks "$SRV_PID")
	r1=$(cpu_ticks "$REDIS_PID")
	# The warmup's CPU is in the deltas too: scale by the measured share.
	jq -c --arg lbl "$label" --arg store "$store" --arg alg "$alg" --arg load "$l" \
		--argjson srv $((s1 - s0)) --argjson red $((r1 - r0)) --argjson tck "$CLK_TCK" \
		--argjson warm "$(secs "$WARMUP")" --argjson dur "$(secs "$DURATION")" '
		($dur / ($dur + $warm)) as $share
		| (.ok + .over_limit) as $dec
		| . + {"label": $lbl, store: $store, alg: $alg, load1: $load,
			server_us: (if $dec > 0 then $srv / $tck * $share * 1e6 / $dec else 0 end),
			redis_us: (if $dec > 0 then $red / $tck * $share * 1e6 / $dec else 0 end),
			loadgen_us: (if $dec > 0 then .loadgen_cpu_seconds * 1e6 / $dec else 0 end)}' \
		"$RES/$label.json" >>"$ROWS"
	log "$label: $(jq -r '"\(.decisions_per_sec|floor)/s p50 \(.latency.p50_us|floor)µs p99 \(.latency.p99_us|floor)µs errors \(.errors)"' "$RES/$label.json")"
}

# profile NAME KEY: a CPU profile of the server under 64-caller load.
profile() {
	local name=$1 key=$2 secs
	[[ $PROFILE == 1 && -n $SRV_ADMIN ]] && has_flag pprof || return 0
	secs=$(($(secs "$DURATION" | cut -d. -f1) - 3))
	((secs < 2)) && secs=2
	"$BIN/loadgen" -addr "$SRV_GRPC" -json -c "$CALLERS" -conns "$CONNS" -d "$DURATION" -warmup 0 \
		-keys "$KEYS" -domain bench -key "$key" >"$RES/profile-$name.json" &
	local lg=$!
	sleep 1
	curl -sf -o "$RES/cpu-$name.pprof" "http://$SRV_ADMIN/debug/pprof/profile?seconds=$secs" || true
	wait "$lg" || true
	if [[ -s $RES/cpu-$name.pprof ]]; then
		go tool pprof -top -nodecount=25 "$BIN/fastlimit" "$RES/cpu-$name.pprof" >"$RES/cpu-$name.top.txt" 2>/dev/null || true
		go tool pprof -top -cum -nodecount=40 "$BIN/fastlimit" "$RES/cpu-$name.pprof" >"$RES/cpu-$name.cum.txt" 2>/dev/null || true
		log "profile: $RES/cpu-$name.pprof"
	fi
}

log "embedded store"
start_server memory
for d in 1 3; do
	for c in "$CALLERS" 1; do
		scenario "memory-unlimited-d$d-c$c" "none" "unlimited" unlimited "$d" "$c"
		scenario "memory-fw-d$d-c$c" "embedded" "fixed window" fw "$d" "$c"
	done
done
profile memory fw
stop_server

log "single Redis"
start_server redis --redis-url "$REDIS_URL"
for d in 1 3; do
	scenario "redis-unlimited-d$d-c$CALLERS" "none" "unlimited" unlimited "$d" "$CALLERS"
	for c in "$CALLERS" 1; do
		scenario "redis-fw-d$d-c$c" "Redis" "fixed window" fw "$d" "$c"
		scenario "redis-sw-d$d-c$c" "Redis" "sliding window" sw "$d" "$c"
		scenario "redis-tb-d$d-c$c" "Redis" "token bucket" tb "$d" "$c"
	done
done
profile redis fw
stop_server

if ((CACHE > 0)) && has_flag local-cache-size-in-bytes; then
	# Over-limit traffic: 100 identifiers, one hit an hour each, so all but
	# the first hit of each are denied; without and with the local cache.
	log "single Redis, over-limit traffic"
	start_server redis-over --redis-url "$REDIS_URL"
	scenario "over-nocache-d1-c$CALLERS" "Redis, over-limit traffic" "fixed window, 1/hour" over 1 "$CALLERS" -keys 100
	stop_server
	start_server redis-cache --redis-url "$REDIS_URL" --local-cache-size-in-bytes "$CACHE"
	scenario "over-cache-d1-c$CALLERS" "Redis, over-limit traffic, --local-cache-size-in-bytes $CACHE" "fixed window, 1/hour" over 1 "$CALLERS" -keys 100
	stop_server
else
	CACHE=0
fi

if ((BATCHES > 0)) && has_flag redis-batches && has_flag redis-conns; then
	log "single Redis through go-redis' pool, requests coalesced (--redis-conns 0 --redis-batches $BATCHES)"
	start_server redisb --redis-url "$REDIS_URL" --redis-conns 0 --redis-batches "$BATCHES"
	RB_STORE="Redis, go-redis (--redis-conns 0 --redis-batches $BATCHES)"
	scenario "redisb-unlimited-d1-c$CALLERS" "none" "unlimited" unlimited 1 "$CALLERS"
	scenario "redisb-fw-d1-c$CALLERS" "$RB_STORE" "fixed window" fw 1 "$CALLERS"
	scenario "redisb-fw-d1-c1" "$RB_STORE" "fixed window" fw 1 1
	scenario "redisb-fw-d3-c$CALLERS" "$RB_STORE" "fixed window" fw 3 "$CALLERS"
	profile redisb fw
	stop_server
else
	BATCHES=0
fi

# The memory and expiry measurements go through a server on Redis.
start_server redis-memory --redis-url "$REDIS_URL"
# ---------------------------------------------------------------- Redis memory
# mem_round KEY: identifiers created through the server on one rule, then
# INFO memory, DBSIZE and MEMORY USAGE of sample keys.
MEMROWS=$RES/memory.tsv
: >"$MEMROWS"
used_memory() { rcli INFO memory | tr -d '\r' | awk -F: '/^used_memory:/ {print $2}'; }
mem_round() {
	local key=$1 alg=$2 m0 m1 n k total=0 samples=0 sample_key=
	rcli FLUSHALL >/dev/null
	# Let clientsCron shrink the query buffers of the server's connections.
	sleep 1
	m0=$(used_memory)
	"$BIN/loadgen" -addr "$SRV_GRPC" -json -c "$CALLERS" -conns "$CONNS" -d 300s -warmup 0 -pick seq \
		-keys "$MEM_IDS" -n $(((MEM_IDS + 2) / 3)) -descriptors 3 -domain bench -key "$key" >"$RES/memory-$key.json"
	m1=$(used_memory)
	n=$(rcli DBSIZE)
	for _ in 1 2 3 4 5 6 7 8; do
		k=$(rcli RANDOMKEY)
		[[ -z $k ]] && continue
		sample_key=$k
		total=$((total + $(rcli MEMORY USAGE "$k" SAMPLES 0)))
		samples=$((samples + 1))
	done
	# One key per identifier for every algorithm; a failed request would
	# leave an identifier without one, so divide by the keys.
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$alg" "$MEM_IDS" "$n" "$((m1 - m0))" \
		"$(((m1 - m0) / (n > 0 ? n : 1)))" "$((samples > 0 ? total / samples : 0))" "$sample_key" \
		"$(jq -r .errors "$RES/memory-$key.json")" >>"$MEMROWS"
	log "redis memory $alg: $n keys, $(((m1 - m0) / (n > 0 ? n : 1))) bytes/key"
}
# A first round warms Redis' and the server's buffers; it is not reported.
mem_round fw_hour warmup
: >"$MEMROWS"
mem_round fw_hour "fixed window"
mem_round sw_hour "sliding window"
mem_round tb_hour "token bucket"

# ---------------------------------------------------------------- expiry
log "expiry of 1-second windows"
rcli FLUSHALL >/dev/null
EXPIRY_N=10000
"$BIN/loadgen" -addr "$SRV_GRPC" -json -c "$CALLERS" -conns "$CONNS" -d 60s -warmup 0 -pick seq \
	-keys $((3 * EXPIRY_N)) -n "$EXPIRY_N" -descriptors 3 -domain bench -key fw_1s,sw_1s,tb_1s >"$RES/expiry.json"
EXPIRY_END=$(date +%s.%N)
EXPIRY=$RES/expiry.tsv
: >"$EXPIRY"
expiry_point() {
	awk -v now="$(date +%s.%N)" -v end="$EXPIRY_END" -v n="$1" 'BEGIN {printf "%.1f\t%s\n", now - end, n}' >>"$EXPIRY"
}
expiry_point "$(rcli DBSIZE)"
count_keys() { rcli --scan --pattern "*$1=*" | wc -l; }
EXPIRY_BY_RULE="fixed window $(count_keys fw_1s), sliding window $(count_keys sw_1s), token bucket $(count_keys tb_1s)"
for _ in $(seq 40); do
	n=$(rcli DBSIZE)
	expiry_point "$n"
	[[ $n == 0 ]] && break
	sleep 0.25
done
log "expiry: $(tail -1 "$EXPIRY" | tr '\t' ' ')"
stop_server

# ---------------------------------------------------------------- Redis ceiling
log "redis-benchmark EVALSHA fixed_window.lua"
rcli FLUSHALL >/dev/null
SHA=$(rcli SCRIPT LOAD "$(cat lua/fixed_window.lua)")
# ARGV: limit (milli-requests), window (ms), cost (milli-requests), now (0: Redis TIME).
RB_ARGS=(EVALSHA "$SHA" 1 'ratelimit:{bench/fw=__rand_int__}:default:' 4000000000000 1000 1000 0)
RB_CMD="redis-benchmark -h 127.0.0.1 -p PORT -c $CALLERS -r $KEYS --csv ${RB_ARGS[*]}"
redis_bench() {
	local name=$1 n=$2
	shift 2
	local l r0 r1
	l=$(load1)
	r0=$(cpu_ticks "$REDIS_PID")
	redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -n "$n" -c "$CALLERS" -r "$KEYS" --csv "$@" "${RB_ARGS[@]}" \
		| tail -1 | tr -d '"' >"$RES/redis-benchmark-$name.csv"
	r1=$(cpu_ticks "$REDIS_PID")
	echo "$name,$n,$l,$((r1 - r0)),$(cat "$RES/redis-benchmark-$name.csv" | cut -d, -f2-)" >>"$RES/redis-benchmark.csv"
	log "redis-benchmark $name: $(cut -d, -f2 "$RES/redis-benchmark-$name.csv")/s"
}
: >"$RES/redis-benchmark.csv"
redis_bench "no pipelining" "$REDIS_N"
redis_bench "-P 16" $((REDIS_N * 5)) -P 16

# The loopback round trip of this machine, the floor under any latency:
# one client, one PING at a time.
log "redis-benchmark PING, 1 client"
redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -n 20000 -c 1 --csv -t ping_mbulk | tail -1 | tr -d '"' >"$RES/rtt.csv"
RTT_P50=$(awk -F, '{printf "%.0f", $5 * 1000}' "$RES/rtt.csv")
log "loopback round trip p50 ${RTT_P50}µs"

# ---------------------------------------------------------------- embedded RSS
RSS=$RES/rss.tsv
: >"$RSS"
metric() {
	[[ -n $SRV_ADMIN ]] || { echo; return; }
	curl -sf "http://$SRV_ADMIN/metrics" | awk -v m="$1" '$1 == m {printf "%d", $2}'
}
# rss_point appends RSS, peak RSS and the live heap at the last GC: the
# GC's next goal is twice that with GOGC=100 (the server sets no other).
rss_point() {
	local goal
	goal=$(metric go_memstats_next_gc_bytes)
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$(rss_kib "$SRV_PID")" "${goal:+$((goal / 2 / 1048576))}" \
		"$(awk '/^VmHWM:/ {print $2}' "/proc/$SRV_PID/status")" >>"$RSS"
}
# settle sends requests on the unlimited rule (garbage) until the GC has
# completed two cycles, so that heap in use is live state.
settle() {
	local g0 g
	g0=$(metric go_gc_duration_seconds_count)
	for _ in $(seq 40); do
		"$BIN/loadgen" -addr "$SRV_GRPC" -json -c "$CALLERS" -conns "$CONNS" -d 30s -warmup 0 -n 10000 \
			-descriptors 10 -key unlimited >/dev/null
		g=$(metric go_gc_duration_seconds_count)
		[[ -z $g0 || -z $g ]] && return
		((g >= g0 + 2)) && return
	done
}
# rss_round KEY OFFSET: RSS_IDS new identifiers on rule KEY, 10 per request.
rss_round() {
	"$BIN/loadgen" -addr "$SRV_GRPC" -json -c "$CALLERS" -conns "$CONNS" -d 600s -warmup 0 -pick seq \
		-keys "$RSS_IDS" -offset "$2" -n $(((RSS_IDS + 9) / 10)) -descriptors 10 -domain bench -key "$1" \
		>"$RES/rss-$1-$2.json"
	log "rss: $RSS_IDS identifiers on $1 in $(jq -r '.seconds | floor' "$RES/rss-$1-$2.json") s, $(jq -r .errors "$RES/rss-$1-$2.json") errors"
}
# wait_sweep waits for the first janitor tick after every fw_1s window so
# far has ended. The janitor ticks every SWEEP s from an instant between
# the server's launch and its first healthy answer.
wait_sweep() {
	local wait
	wait=$(jq -n --argjson l "$SRV_LAUNCH" --argjson r "$SRV_READY" --argjson now "$(date +%s.%N)" --argjson p "$SWEEP" \
		'(($now + 1.5 - $l) / $p | floor + 1) as $k | [$r + $k * $p + 2 - $now, 0] | max | ceil')
	log "rss: waiting ${wait}s for the janitor's sweep (every ${SWEEP}s)"
	sleep "$wait"
}
if ((RSS_IDS > 0)); then
	log "embedded store RSS at $RSS_IDS identifiers"
	start_server rss --memory-sweep-interval "${SWEEP}s"
	settle
	rss_point "started; settled on the unlimited rule" 0
	rss_round fw_hour 0
	rss_point "$RSS_IDS identifiers on \`fw_hour\` (1-hour windows, all live)" "$RSS_IDS"
	settle
	rss_point "settled (GC ran): live state" "$RSS_IDS"
	seen=$RSS_IDS
	for cycle in $(seq "$RSS_CYCLES"); do
		rss_round fw_1s "$seen"
		seen=$((seen + RSS_IDS))
		rss_point "cycle $cycle: + $RSS_IDS new identifiers on \`fw_1s\` (1-second windows)" "$seen"
		wait_sweep
		settle
		rss_point "cycle $cycle: after the janitor's sweep; settled" "$seen"
	done
	stop_server
fi

# ---------------------------------------------------------------- Go benchmarks
GOBENCH=$RES/gobench.txt
: >"$GOBENCH"
if [[ $GO_BENCH == 1 ]]; then
	log "Go benchmarks (-benchtime $GO_BENCHTIME)"
	go test -run '^$' -bench . -benchmem -benchtime "$GO_BENCHTIME" ./pkg/descriptors/ ./pkg/limiter/ >>"$GOBENCH" 2>&1 ||
		log "Go benchmarks failed, see $GOBENCH"
	go test -run '^$' -bench 'ShouldRateLimit' -benchmem -benchtime "$GO_BENCHTIME" ./cmd/server/ >>"$GOBENCH" 2>&1 ||
		log "service benchmarks failed, see $GOBENCH"
	REDIS_ADDR=127.0.0.1:$REDIS_PORT go test -run '^$' -bench 'Take' -benchmem -benchtime "$GO_BENCHTIME" ./pkg/store/ >>"$GOBENCH" 2>&1 ||
		log "store benchmarks failed, see $GOBENCH"
fi

# ---------------------------------------------------------------- report
log "writing $OUT"
row() { jq -c --arg l "$1" 'select(.label == $l)' "$ROWS"; }
rate() { row "$1" | jq -r '.decisions_per_sec'; }
p() { row "$1" | jq -r ".latency.$2"; }
cpu() { row "$1" | jq -r '.server_us + .redis_us + .loadgen_us'; }
pct() { jq -rn --argjson a "$1" --argjson b "$2" 'if $b > 0 then $a / $b * 100 | floor else 0 end'; }
met() { jq -rn --argjson ok "$1" 'if $ok then "yes" else "**no**" end'; }
fmt_us() { jq -rn --argjson v "$1" 'if $v < 1000 then "\($v|floor) µs" else "\($v/10|floor/100) ms" end'; }

U64=$(rate "redis-unlimited-d1-c$CALLERS")
R64=$(rate "redis-fw-d1-c$CALLERS")
R64P99=$(p "redis-fw-d1-c$CALLERS" p99_us)
R1P50=$(p "redis-fw-d1-c1" p50_us)
MU64=$(rate "memory-unlimited-d1-c$CALLERS")
M64=$(rate "memory-fw-d1-c$CALLERS")
if ((BATCHES > 0)); then
	BU64=$(rate "redisb-unlimited-d1-c$CALLERS")
	B64=$(rate "redisb-fw-d1-c$CALLERS")
	B64P99=$(p "redisb-fw-d1-c$CALLERS" p99_us)
	B1P50=$(p "redisb-fw-d1-c1" p50_us)
	BU64C=$(cpu "redisb-unlimited-d1-c$CALLERS")
	B64C=$(cpu "redisb-fw-d1-c$CALLERS")
fi
U64C=$(cpu "redis-unlimited-d1-c$CALLERS")
R64C=$(cpu "redis-fw-d1-c$CALLERS")
MU64C=$(cpu "memory-unlimited-d1-c$CALLERS")
M64C=$(cpu "memory-fw-d1-c$CALLERS")

GEN=$TMP/generated.md
{
	echo "<!-- bench.sh:begin (generated by scripts/bench.sh; edits here are overwritten) -->"
	echo
	echo "## Results of $(date -u +%Y-%m-%d) (scripts/bench.sh)"
	echo
	echo "| machine | |"
	echo "| --- | --- |"
	echo "| CPUs (nproc) | $(nproc) |"
	echo "| CPU | $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo) |"
	echo "| memory | $(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) |"
	echo "| kernel | $(uname -sr) |"
	echo "| Go | $(go env GOVERSION) |"
	echo "| Redis | $REDIS_VERSION (redis-server, single node, no persistence) |"
	echo "| FastLimit | $VERSION |"
	echo "| load average (1 min) at start / end | $LOAD_START / $(load1) (this run's own load included at the end) |"
	echo
	echo "Loadgen, server and Redis share these $(nproc) CPUs, and so do other users of the"
	echo "machine: the load column is the 1-minute load average before each scenario. Compare"
	echo "rows measured close together; CPU per decision is steadier than decisions/s."
	echo
	echo "### Targets"
	echo
	echo "The last column is the same ratio from CPU time per decision (server + Redis + loadgen):"
	echo "what the rate ratio tends to when all three saturate these CPUs, and far less noisy."
	echo
	echo "| target | measured | goal | met | by CPU per decision |"
	echo "| --- | --- | --- | --- | --- |"
	echo "| Redis fixed window (default flags: --redis-conns 2), $CALLERS callers, 1 descriptor: rate vs \`unlimited\` | $(printf '%.0f' "$R64")/s vs $(printf '%.0f' "$U64")/s = $(pct "$R64" "$U64") % | ≥ 80 % | $(met "$(jq -n "$R64 >= 0.8 * $U64")") | $(printf '%.0f' "$R64C") µs vs $(printf '%.0f' "$U64C") µs = $(pct "$U64C" "$R64C") % |"
	echo "| Redis fixed window, $CALLERS callers, 1 descriptor: p99 | $(fmt_us "$R64P99") | ≤ 5 ms | $(met "$(jq -n "$R64P99 <= 5000")") | |"
	echo "| Redis fixed window, 1 caller: p50 | $(fmt_us "$R1P50") | ≤ 250 µs | $(met "$(jq -n "$R1P50 <= 250")") | |"
	echo "| for scale: one loopback round trip (\`redis-benchmark -c 1 PING\`, p50); a decision on Redis takes two | ${RTT_P50} µs | | | |"
	if ((BATCHES > 0)); then
		echo "| same through go-redis (\`--redis-conns 0 --redis-batches $BATCHES\`): rate vs \`unlimited\` | $(printf '%.0f' "$B64")/s vs $(printf '%.0f' "$BU64")/s = $(pct "$B64" "$BU64") % | ≥ 80 % | $(met "$(jq -n "$B64 >= 0.8 * $BU64")") | $(printf '%.0f' "$B64C") µs vs $(printf '%.0f' "$BU64C") µs = $(pct "$BU64C" "$B64C") % |"
		echo "| same through go-redis: p99 | $(fmt_us "$B64P99") | ≤ 5 ms | $(met "$(jq -n "$B64P99 <= 5000")") | |"
		echo "| same through go-redis, 1 caller: p50 | $(fmt_us "$B1P50") | ≤ 250 µs | $(met "$(jq -n "$B1P50 <= 250")") | |"
	fi
	echo "| embedded store, $CALLERS callers, 1 descriptor: rate vs \`unlimited\` | $(printf '%.0f' "$M64")/s vs $(printf '%.0f' "$MU64")/s = $(pct "$M64" "$MU64") % | ≥ 95 % | $(met "$(jq -n "$M64 >= 0.95 * $MU64")") | $(printf '%.0f' "$M64C") µs vs $(printf '%.0f' "$MU64C") µs = $(pct "$MU64C" "$M64C") % |"
	echo "| for scale: the reference server, 64 callers, on this machine (not re-measured here) | ~6,600/s on Redis (p99 ~24 ms), ~9,800/s with no store | | | |"
	echo
	echo "### Decisions per second and latency over gRPC"
	echo
	echo "\`loadgen -c C -conns $CONNS -d $DURATION -warmup $WARMUP -keys $KEYS -descriptors D -key K\` against"
	echo "the server with \`bench/rules/bench.yaml\` (limits that never deny) and \`${EXTRA_FLAGS[*]}\`"
	echo "(defaults otherwise: single Redis over --redis-conns 2 shared connections). A decision is one"
	echo "ShouldRateLimit answer; with 3 descriptors it decides 3 counters in one Redis round trip."
	echo "Latency is seen by the caller (closed loop: each caller waits for its answer)."
	echo "CPU columns: CPU time of each process per decision. \"vs unlimited\" compares with the"
	echo "\`unlimited\` run of the same server, descriptors and callers, or else of the embedded-store server."
	echo
	echo "| store | algorithm | descr. | callers | decisions/s | vs unlimited | p50 | p90 | p99 | max | server CPU | Redis CPU | loadgen CPU | errors | load |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	jq -r --slurp '
		def us: if . < 1000 then "\(. | floor) µs" else "\(. / 10 | floor / 100) ms" end;
		map(select(.store == "none")) as $u
		| ($u | map({key: "\(.label | split("-")[0])-\(.descriptors)-\(.callers)", value: .decisions_per_sec}) | from_entries) as $floor
		| ($u | map({key: "\(.descriptors)-\(.callers)", value: .decisions_per_sec}) | from_entries) as $any
		| .[] | ($floor["\(.label | split("-")[0])-\(.descriptors)-\(.callers)"] // $any["\(.descriptors)-\(.callers)"]) as $f
		| "| \(if .store == "none" then "— (`unlimited`, \(.label | split("-")[0]) server)" else .store end) | \(.alg) | \(.descriptors) | \(.callers) | \(.decisions_per_sec | floor) | \(if .store == "none" or $f == null then "" else "\(.decisions_per_sec / $f * 100 | floor) %" end) | \(.latency.p50_us | us) | \(.latency.p90_us | us) | \(.latency.p99_us | us) | \(.latency.max_us | us) | \(.server_us | floor) µs | \(if (.store | startswith("Redis")) then "\(.redis_us | floor) µs" else "" end) | \(.loadgen_us | floor) µs | \(.errors) | \(.load1) |"' "$ROWS"
	echo
	echo "### Redis' own ceiling: redis-benchmark of our fixed-window script"
	echo
	echo "The same Redis, no FastLimit: \`SCRIPT LOAD\` of \`lua/fixed_window.lua\`, then"
	echo
	echo '```'
	echo "$RB_CMD"
	echo "$RB_CMD -P 16"
	echo '```'
	echo
	echo "(ARGV: limit 4e12 milli-requests, window 1000 ms, cost 1000, now 0 = Redis TIME.)"
	echo
	echo "| run | requests | EVALSHA/s | p50 | p95 | p99 | max | Redis CPU | load |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	while IFS=, read -r name n l ticks rps _avg _min p50 p95 p99 mx; do
		printf '| %s | %s | %.0f | %s ms | %s ms | %s ms | %s ms | %s µs | %s |\n' "$name" "$n" "$rps" "$p50" "$p95" "$p99" "$mx" \
			"$(jq -rn --argjson t "$ticks" --argjson c "$CLK_TCK" --argjson n "$n" '$t / $c * 1e6 / $n | floor')" "$l"
	done <"$RES/redis-benchmark.csv"
	echo
	echo "### Redis memory per tracked identifier"
	echo
	echo "For each algorithm, after FLUSHALL: $MEM_IDS new identifiers decided through the server"
	echo "(rules \`fw_hour\`, \`sw_hour\`, \`tb_hour\`: state that lives an hour; each identifier"
	echo "has one key), then the \`used_memory\` delta of INFO memory divided by the keys, and"
	echo "MEMORY USAGE (SAMPLES 0) averaged over 8 RANDOMKEY samples. Keys look like the sample;"
	echo "longer identifiers cost their extra bytes. A sliding window holds a second key per"
	echo "identifier during the window after a busy one."
	echo
	echo "| algorithm | identifiers sent | keys (DBSIZE) | used_memory delta | bytes per identifier | MEMORY USAGE per key | failed requests | sample key |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
	while IFS=$'\t' read -r alg ids n delta per usage sample errs; do
		echo "| $alg | $ids | $n | $delta | $per | $usage | $errs | \`$sample\` |"
	done <"$MEMROWS"
	echo
	echo "### Keys disappear when their window is over"
	echo
	echo "$EXPIRY_N requests of 3 descriptors (\`fw_1s\`, \`sw_1s\`, \`tb_1s\`: 1-second windows,"
	echo "a bucket emptied in one hit) with new identifiers each, then DBSIZE from the last answer on."
	echo "Keys by rule right after the load (SCAN): $EXPIRY_BY_RULE; the earliest had expired already."
	echo
	echo "| seconds after the last write | keys (DBSIZE) |"
	echo "| --- | --- |"
	awk -F'\t' 'NR == 1 || $2 != prev || $2 == 0 {printf "| %s | %s |\n", $1, $2} {prev = $2}' "$EXPIRY"
	echo
	if ((RSS_IDS > 0)); then
		echo "### Embedded store: server RSS"
		echo
		echo "A fresh server on the embedded store; identifiers decided through gRPC, 10 per request"
		echo "(\`loadgen -pick seq -descriptors 10\`), each identifier new. VmRSS and VmHWM (peak RSS)"
		echo "from /proc/PID/status; live Go heap at the last GC, as half the GC's next goal"
		echo "(go_memstats_next_gc_bytes of /metrics, GOGC=100). \"Settled\" means after requests on"
		echo "the unlimited rule until the GC had run twice since the point before. The janitor sweeps expired state every"
		echo "${SWEEP} s (\`--memory-sweep-interval ${SWEEP}s\`); swept maps keep"
		echo "their buckets for the next identifiers."
		echo
		echo "| point | identifiers seen | VmRSS | VmHWM | live Go heap |"
		echo "| --- | --- | --- | --- | --- |"
		while IFS=$'\t' read -r what ids kib heap hwm; do
			echo "| $what | $ids | $((kib / 1024)) MiB | $((hwm / 1024)) MiB | ${heap:-n/a} MiB |"
		done <"$RSS"
		echo
		jq -rn --rawfile t "$RSS" --argjson n "$RSS_IDS" '
			($t | split("\n") | map(select(length > 0) | split("\t"))) as $r
			| ($r[0][2] | tonumber) as $rss0 | ($r[1][2] | tonumber) as $rss1
			| "At \($n) live identifiers: \((($rss1 - $rss0) * 1024 / $n) | floor) bytes of RSS per identifier right after the load"
			+ (if ($r[0][3] != "" and $r[2][3] != "") then
				", \((($r[2][3] | tonumber) - ($r[0][3] | tonumber)) * 1048576 / $n | floor) bytes of live Go heap"
				else "" end)
			+ " once settled (map slots, key string, counter). The rest of RSS is GC headroom: the heap"
			+ " grows to twice the live heap between collections."'
		echo
	fi
	if [[ -s $GOBENCH ]]; then
		echo "### Go benchmarks"
		echo
		echo "\`go test -run '^\$' -bench . -benchmem -benchtime $GO_BENCHTIME ./pkg/descriptors/ ./pkg/limiter/\` and"
		echo "\`-bench ShouldRateLimit ./cmd/server/\` (a whole gRPC decision on the embedded store, metrics on) and"
		echo "\`-bench Take ./pkg/store/\` (the Redis ones against the same redis-server: RedisMux is \`--redis-conns\`, Redis is go-redis)."
		echo
		echo "| benchmark | ns/op | B/op | allocs/op |"
		echo "| --- | --- | --- | --- |"
		awk '/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name); ns = b = a = "";
			for (i = 2; i <= NF; i++) { if ($i == "ns/op") ns = $(i-1); if ($i == "B/op") b = $(i-1); if ($i == "allocs/op") a = $(i-1) }
			printf "| %s | %s | %s | %s |\n", name, ns, b, a }' "$GOBENCH"
		if grep -qE '^(FAIL|---)' "$GOBENCH"; then
			echo
			echo "Some Go benchmarks failed or were skipped; see .tmp/bench/gobench.txt."
		fi
		echo
	fi
	echo "Run time: $(($(date +%s) - START)) s. Reproduce with \`scripts/bench.sh\` (or \`make bench\`);"
	echo "raw results are in \`.tmp/bench/\`."
	echo
	echo "<!-- bench.sh:end -->"
} >"$GEN"

# Replace the generated part of OUT, keeping what surrounds it.
if [[ -f $OUT ]] && grep -q '<!-- bench.sh:begin' "$OUT"; then
	awk -v gen="$GEN" '
		/<!-- bench.sh:begin/ {while ((getline line < gen) > 0) print line; skip = 1; next}
		/<!-- bench.sh:end -->/ {skip = 0; next}
		!skip' "$OUT" >"$TMP/out.md"
else
	{
		if [[ -f $OUT ]]; then cat "$OUT"; else printf '# Benchmarks\n\nMeasured by `scripts/bench.sh`.\n'; fi
		echo
		cat "$GEN"
	} >"$TMP/out.md"
fi
cp "$TMP/out.md" "$OUT"
cat "$GEN"
log "done"
