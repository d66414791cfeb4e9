#!/usr/bin/env bash
# Serving overhead: single-stream decode tokens/s through gRPC (`hearth bench`
# against hearth-server) as a fraction of `hearth-generate` on the same model
# file and settings, measured in one run; then aggregate tokens/s with two
# instances and four concurrent streams.
#
#   bench/server/serving_overhead.sh [BUILD_DIR]     (default build/release)
#
# Two kernel-thread settings, each the same on both sides:
#   * one thread fewer than the cores (at least 1): the cores left over run
#     gRPC, the piece writer and the client, as a deployment that reserves a
#     core for serving would;
#   * every core (the default of both programs): the client, gRPC and the
#     kernels then share the cores, so the ratio also carries the client's
#     and the transport's CPU time, which a client on another machine would
#     not take from the server.
# Each setting runs ROUNDS paired rounds (hearth-generate, then 2 requests
# through gRPC, alternating so that drift in the machine's speed hits both);
# it prints every pair, the median of the paired ratios and best against best.
#
# Env: HEARTH_BENCH_SHAPE="--dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000"
#      HEARTH_BENCH_TOKENS=256  HEARTH_BENCH_ROUNDS=6  HEARTH_BENCH_TYPE=q8_0
# Run it on an otherwise idle machine.
set -euo pipefail
build=${1:-build/release}
shape=${HEARTH_BENCH_SHAPE:---dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000}
tokens=${HEARTH_BENCH_TOKENS:-256}
rounds=${HEARTH_BENCH_ROUNDS:-6}
type=${HEARTH_BENCH_TYPE:-q8_0}
cores=$(nproc)
# shellcheck source=bench/server/hearth_server.sh
. "$(dirname "$0")/hearth_server.sh"

model=$work/model.gguf
# shellcheck disable=SC2086
"$build/tools/hearth-model" synth "$model" $shape --type "$type" --context 2048 >/dev/null
prompt="the quick brown fox jumps over the lazy dog"

start_server() {  # start_server INSTANCES KERNEL_THREADS
  start_hearth "$build" --model bench="$model" --instances "$1" --queue 16 --kernel-threads "$2"
  addr=$grpc_addr
}
stop_server() { stop_hearth; }

json_field() { /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print($1)"; }

summary=()
compare() {  # compare KERNEL_THREADS LABEL
  local threads=$1 label=$2 pairs=""
  start_server 1 "$threads"
  echo "--- kernel threads $threads on both sides ($label)"
  for r in $(seq 1 "$rounds"); do
    g=$("$build/tools/hearth-generate" --model "$model" --prompt "$prompt" --max-tokens "$tokens" \
          --threads "$threads" --ignore-eos --temperature 0 --json 2>/dev/null |
        json_field 'd["stats"]["decode_tokens_per_s"]')
    s=$("$build/tools/hearth" bench --server "$addr" --model bench --concurrency 1 --requests 2 \
          --prompt "$prompt" --max-tokens "$tokens" --ignore-eos --json --quiet 2>/dev/null |
        json_field 'd["stream_decode_tokens_per_s"]')
    echo "round $r: hearth-generate $g tok/s, hearth bench (1 stream via gRPC) $s tok/s"
    pairs="$pairs $g,$s"
  done
  stop_server
  summary+=("$(/usr/bin/python3 - "$threads" "$label" $pairs <<'PY'
import statistics, sys
threads, label, pairs = sys.argv[1], sys.argv[2], [tuple(map(float, p.split(","))) for p in sys.argv[3:]]
ratios = [s / g for g, s in pairs]
best_g, best_s = max(g for g, _ in pairs), max(s for _, s in pairs)
print(f"kernel threads {threads} ({label}): hearth-generate best {best_g:.2f} tok/s, "
      f"gRPC 1 stream best {best_s:.2f} tok/s = {100 * best_s / best_g:.1f}%; "
      f"median of {len(ratios)} paired ratios {100 * statistics.median(ratios):.1f}% "
      f"(min {100 * min(ratios):.1f}%, max {100 * max(ratios):.1f}%)")
PY
)")
}

spare=$(( cores > 1 ? cores - 1 : 1 ))
compare "$spare" "a core left for gRPC and the client"
compare "$cores" "every core; the client shares them"

start_server 2 "$cores"
agg=$("$build/tools/hearth" bench --server "$addr" --model bench --concurrency 4 --requests 8 \
        --prompt "$prompt" --max-tokens "$tokens" --ignore-eos --json --quiet 2>/dev/null |
      json_field 'd["tokens_per_s"]')
stop_server

echo
echo "=== serving overhead (one run, $cores cores; model: synth $shape --type $type; $tokens tokens) ==="
for line in "${summary[@]}"; do echo "$line"; done
printf 'hearth bench, 2 instances x 4 streams, kernel threads %s: %.2f tok/s aggregate\n' "$cores" "$agg"
