#!/bin/sh
# Benchmarks redisstore against redis_rate on a private redis-server, and
# prints the benchstat comparison. Run from anywhere:
#
#	sh redisstore/internal/bench/run.sh [runs]
#
# It starts redis-server on 127.0.0.1:${PORT:-6399} (no persistence), so that
# the srv-µs/op metric counts only these calls, builds the benchmark once,
# and makes ${1:-6} runs of 2 s per benchmark, alternating which token-bucket
# implementation goes first so that a drift in the machine's load favours
# neither. Results go to ${OUT:-/tmp/redisstore-bench.txt}.
set -eu
cd "$(dirname "$0")"
PORT=${PORT:-6399}
OUT=${OUT:-/tmp/redisstore-bench.txt}
RUNS=${1:-6}
BIN=$(mktemp -d)/bench.test

redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >/dev/null
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$(dirname "$BIN")"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

go test -c -o "$BIN" .
bench() { PACE_REDIS_ADDR=127.0.0.1:$PORT "$BIN" -test.run '^$' -test.benchtime 2s -test.bench "$1"; }
: >"$OUT"
i=0
while [ "$i" -lt "$RUNS" ]; do
	if [ $((i % 2)) -eq 0 ]; then
		bench 'TokenBucket/impl=pace$' >>"$OUT"; bench 'TokenBucket/impl=redis_rate$' >>"$OUT"
	else
		bench 'TokenBucket/impl=redis_rate$' >>"$OUT"; bench 'TokenBucket/impl=pace$' >>"$OUT"
	fi
	bench AcquireSlotBurst >>"$OUT"
	i=$((i + 1))
done
go run golang.org/x/perf/cmd/benchstat@latest -col /impl "$OUT"
