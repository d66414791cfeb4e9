#!/usr/bin/env bash
# The OpenAI HTTP front end's overhead against gRPC: one hearth-server with
# --http-listen, a synthetic TinyLlama-1.1B-shaped model (Q4_0, Llama 2's
# real 32k vocabulary from ../shared, the Zephyr chat template), and
# bench_http_overhead measuring streamed chat over HTTP against gRPC Chat and
# streamed completions against gRPC Generate, with 1 stream and with 4
# concurrent streams (2 instances), transports alternating round by round.
#
#   bench/server/http_overhead.sh [BUILD_DIR]     (default build/release)
#
# Env: HEARTH_BENCH_TOKENS=128  HEARTH_BENCH_ROUNDS=8
#      HEARTH_BENCH_SHAPE="--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632"
# Run it on an otherwise idle machine.
set -euo pipefail
build=${1:-build/release}
tokens=${HEARTH_BENCH_TOKENS:-128}
rounds=${HEARTH_BENCH_ROUNDS:-8}
shape=${HEARTH_BENCH_SHAPE:---dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632}
here=$(cd "$(dirname "$0")/../.." && pwd)
vocab=$here/../shared/models/llama-2-tiny-random.gguf
[ -f "$vocab" ] || { echo "http_overhead.sh: $vocab is missing (../shared)" >&2; exit 1; }
# shellcheck source=bench/server/hearth_server.sh
. "$(dirname "$0")/hearth_server.sh"

model=$work/model.gguf
# shellcheck disable=SC2086
"$build/tools/hearth-model" synth "$model" $shape --vocab 32000 --vocab-from "$vocab" \
  --type q4_0 >/dev/null

run() {  # run INSTANCES STREAMS
  start_hearth "$build" --model bench="$model" --instances "$1" --queue 16 \
    --chat-template "bench=$here/tests/chat/templates/HuggingFaceH4-zephyr-7b-beta.jinja" \
    --http-listen 127.0.0.1:0
  "$build/bench/bench_http_overhead" "$grpc_addr" "$http_addr" bench "$tokens" "$2" "$rounds"
  stop_hearth
}

echo "=== HTTP vs gRPC ($(nproc) cores; model: synth $shape --type q4_0, 32k vocabulary) ==="
run 1 1
run 2 4
