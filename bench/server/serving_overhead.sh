#!/usr/bin/env bash
# Serving overhead: single-stream decode tokens/s through gRPC (`hearth bench`
# against hearth-server) as a fraction of `hearth-generate` on the same model
# file and settings, measured in one run; then aggregate tokens/s with two
# instances and four concurrent streams.
#
#   bench/server/serving_overhead.sh [BUILD_DIR]     (default build/release)
#
# Env: HEARTH_BENCH_SHAPE="--dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000"
#      HEARTH_BENCH_TOKENS=128  HEARTH_BENCH_ROUNDS=3  HEARTH_BENCH_TYPE=q8_0
# Run it on an otherwise idle machine: both sides share the same cores.
set -euo pipefail
build=${1:-build/release}
shape=${HEARTH_BENCH_SHAPE:---dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000}
tokens=${HEARTH_BENCH_TOKENS:-128}
rounds=${HEARTH_BENCH_ROUNDS:-3}
type=${HEARTH_BENCH_TYPE:-q8_0}
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"; wait "$server_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

model=$work/model.gguf
# shellcheck disable=SC2086
"$build/tools/hearth-model" synth "$model" $shape --type "$type" --context 2048 >/dev/null
prompt="the quick brown fox jumps over the lazy dog"

start_server() {  # start_server INSTANCES
  "$build/server/hearth-server" --model bench="$model" --instances "$1" --queue 16 \
    --listen 127.0.0.1:0 --metrics-listen off >"$work/ready" 2>"$work/server.log" &
  server_pid=$!
  for _ in $(seq 1 600); do
    grep -q '^hearth-server ready' "$work/ready" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  addr=$(sed -n 's/^hearth-server ready grpc=\([^ ]*\).*/\1/p' "$work/ready")
}
stop_server() { kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=; }

json_field() { /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print($1)"; }

start_server 1
gen_best=0; srv_best=0
for r in $(seq 1 "$rounds"); do
  # Alternate the two sides so drift in the machine's speed hits both.
  g=$("$build/tools/hearth-generate" --model "$model" --prompt "$prompt" --max-tokens "$tokens" \
        --ignore-eos --temperature 0 --json 2>/dev/null | json_field 'd["stats"]["decode_tokens_per_s"]')
  s=$("$build/tools/hearth" bench --server "$addr" --model bench --concurrency 1 --requests 2 \
        --prompt "$prompt" --max-tokens "$tokens" --ignore-eos --json --quiet 2>/dev/null |
      json_field 'd["stream_decode_tokens_per_s"]')
  echo "round $r: hearth-generate $g tok/s, hearth bench (1 stream via gRPC) $s tok/s"
  gen_best=$(/usr/bin/python3 -c "print(max($gen_best, $g))")
  srv_best=$(/usr/bin/python3 -c "print(max($srv_best, $s))")
done
stop_server

start_server 2
agg=$("$build/tools/hearth" bench --server "$addr" --model bench --concurrency 4 --requests 8 \
        --prompt "$prompt" --max-tokens "$tokens" --ignore-eos --json --quiet 2>/dev/null |
      json_field 'd["tokens_per_s"]')
stop_server

echo
echo "=== serving overhead (one run; model: synth $shape --type $type; $tokens tokens) ==="
printf 'hearth-generate, best of %s          %8.2f tok/s\n' "$rounds" "$gen_best"
printf 'hearth bench, 1 stream, best of %s   %8.2f tok/s = %.1f%% of hearth-generate\n' \
  "$rounds" "$srv_best" "$(/usr/bin/python3 -c "print(100*$srv_best/$gen_best)")"
printf 'hearth bench, 2 instances x 4 streams %8.2f tok/s aggregate\n' "$agg"
