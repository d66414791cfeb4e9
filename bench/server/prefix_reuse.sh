#!/usr/bin/env bash
# Prefix reuse: what a prompt that starts like an earlier one costs. One
# hearth-server (4 warm instances, 2 kernel threads by default) on 127.0.0.1
# takes `hearth bench` load twice per part, with reuse off
# (disable_prefix_reuse) and on:
#
#   shared prefix  --requests requests at --concurrency, each prompt a shared
#                  prefix of about --prefix-tokens tokens plus 20 words of its
#                  own; one unmeasured request first, so the prefix is in one
#                  instance's cache when the measured ones start (reuse on)
#   chat           --concurrency conversations of --turns turns, each turn
#                  resending the conversation so far plus 20 new words
#
# Printed: TTFT p50 / p99 cold (reuse off) and warm (reuse on) and warm /
# cold; the prompt tokens sent and computed in the chat with and without
# reuse. Targets (issue #14): TTFT warm / cold <= 1/15; chat tokens computed
# with reuse <= 1/4 of those sent.
#
# --llama-server PATH: the shared-prefix part again against llama.cpp's
# llama-server on the same file (-np = the instances, the same threads, KV
# q8_0 with flash attention), cold ("cache_prompt": false) and warm
# ("cache_prompt": true: a slot reuses what its own cache holds), driven by
# batching_load.py with the same prompts; printed beside hearth's, with
# hearth / llama-server for the warm TTFT (target <= 1).
#
#   bench/server/prefix_reuse.sh [--build DIR] [--type q4_0|q8_0] [--model PATH]
#       [--prefix-tokens N] [--requests M] [--concurrency N] [--turns T]
#       [--max-tokens K] [--kernel-threads T] [--models-dir DIR] [--llama-server PATH]
#
# The default model is the TinyLlama 1.1B shape (synthetic weights, made with
# `hearth-model synth` once and kept in --models-dir). The client shares the
# machine's cores with the server; run it on an otherwise idle machine. The
# server is stopped by PID on exit; it listens on 127.0.0.1 only.
set -euo pipefail

build=build/release
type=q4_0
model=
models_dir=/tmp/hearth-batching-models
prefix_tokens=1000
requests=16
concurrency=4
turns=8
max_tokens=16
kernel_threads=2
llama=

die() { echo "prefix_reuse.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --type) type=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --models-dir) models_dir=$2; shift 2 ;;
    --prefix-tokens) prefix_tokens=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --kernel-threads) kernel_threads=$2; shift 2 ;;
    --llama-server) llama=$2; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
for v in prefix_tokens requests concurrency turns max_tokens kernel_threads; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-}: '${!v}' is not a positive whole number"
done
case "$type" in q8_0|q4_0) ;; *) die "--type: '$type' is not q8_0 or q4_0" ;; esac
[ -z "$llama" ] || [ -x "$llama" ] || die "--llama-server: '$llama' is not an executable"
for bin in server/hearth-server tools/hearth tools/hearth-model; do
  [ -x "$build/$bin" ] || die "$build/$bin is missing: build it first"
done

# shellcheck source=bench/synth_model.sh
. "$(dirname "$0")/../synth_model.sh"
if [ -z "$model" ]; then
  model=$(synth_model "$build" "$TINYLLAMA_SHAPE" "$type" "b-tinyllama-1.1B-$type.gguf" \
    "$models_dir") || exit 1
fi
[ -r "$model" ] || die "--model: cannot read '$model'"
# shellcheck source=bench/server/prompt_words.sh
. "$(dirname "$0")/prompt_words.sh"
prefix_words=$(words_for "$prefix_tokens")
prefix_ntok=$(count_tokens "$prefix_words")

work=$(mktemp -d)
server_pid=
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

context=2048
"$build/server/hearth-server" --model "bench=$model" --instances 4 --queue 64 \
  --kernel-threads "$kernel_threads" --context "$context" --listen 127.0.0.1:0 \
  --metrics-listen off >"$work/ready" 2>"$work/log" &
server_pid=$!
for _ in $(seq 1 3000); do  # 300 s
  grep -q '^hearth-server ready' "$work/ready" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { tail -n 30 "$work/log" >&2; die "hearth-server exited during startup"; }
  sleep 0.1
done
addr=$(sed -n 's/^hearth-server ready grpc=\([^ ]*\).*/\1/p' "$work/ready")
[ -n "$addr" ] || die "hearth-server not ready after 300 s"

# summary_of CMD...: CMD's JSON summary. Exit status 1 (some requests failed)
# still prints one, which the report below names; nothing printed is fatal.
summary_of() {
  local out rc=0
  out=$("$@") || rc=$?
  [ -n "$out" ] && [ "$rc" -le 1 ] || die "$(basename "$1") $2 failed (exit $rc) with no summary"
  printf '%s' "$out"
}
bench() {  # bench ARGS...: one `hearth bench` run, its JSON summary
  summary_of "$build/tools/hearth" bench --server "$addr" --model bench --quiet --json \
    --max-tokens "$max_tokens" "$@"
}
echo "prefix_reuse.sh: shared prefix of $prefix_ntok tokens ($prefix_words words), $requests requests at concurrency $concurrency" >&2
cold=$(bench --shared-prefix-tokens "$prefix_words" --requests "$requests" \
  --concurrency "$concurrency" --warmup 1 --no-prefix-reuse)
warm=$(bench --shared-prefix-tokens "$prefix_words" --requests "$requests" \
  --concurrency "$concurrency" --warmup 1)
echo "prefix_reuse.sh: chat, $concurrency conversations of $turns turns" >&2
chat_off=$(bench --chat-turns "$turns" --concurrency "$concurrency" --no-prefix-reuse)
# The conversations differ from the cold run's (--mix-seed 2): nothing of
# them is cached when the reuse run starts.
chat_on=$(bench --chat-turns "$turns" --concurrency "$concurrency" --mix-seed 2)

stop_server
llama_cold='{}' llama_warm='{}'
if [ -n "$llama" ]; then
  helper=$(dirname "$0")/batching_load.py
  port=$(/usr/bin/python3 "$helper" free-port)
  echo "prefix_reuse.sh: starting llama-server -np 4 on 127.0.0.1:$port" >&2
  # Flash attention (a quantized V cache needs it): a plain flag before
  # llama.cpp took on|off|auto for it.
  fa=(-fa)
  "$llama" --help 2>&1 | grep -q -- '--flash-attn \[on|off|auto\]\|--flash-attn FA' && fa=(-fa on)
  "$llama" -m "$model" --host 127.0.0.1 --port "$port" -np 4 -c $(( 4 * context )) \
    -t "$kernel_threads" -tb "$kernel_threads" -ctk q8_0 -ctv q8_0 "${fa[@]}" >"$work/llama.log" 2>&1 &
  server_pid=$!
  /usr/bin/python3 "$helper" wait-http "$port" "$server_pid" 300 ||
    { tail -n 30 "$work/llama.log" >&2; die "llama-server did not become ready"; }
  load() {
    summary_of /usr/bin/python3 "$helper" load --port "$port" --max-tokens "$max_tokens" \
      --shared-prefix-tokens "$prefix_words" --requests "$requests" --concurrency "$concurrency" \
      --warmup 1 "$@"
  }
  llama_cold=$(load)
  llama_warm=$(load --cache-prompt)
  stop_server
fi

/usr/bin/python3 - "$cold" "$warm" "$chat_off" "$chat_on" "$model" "$(nproc)" "$prefix_ntok" \
  "$llama_cold" "$llama_warm" <<'EOF'
import json, sys
cold, warm, chat_off, chat_on = (json.loads(x) for x in sys.argv[1:5])
llama_cold, llama_warm = json.loads(sys.argv[8]), json.loads(sys.argv[9])
for name, r in (("cold", cold), ("warm", warm), ("chat off", chat_off), ("chat on", chat_on),
                ("llama-server cold", llama_cold), ("llama-server warm", llama_warm)):
    if r.get("failed"):
        sys.exit(f"prefix_reuse.sh: {r['failed']} requests of the {name} run failed: {r.get('errors')}")
print(f"=== prefix reuse: {sys.argv[5]}, {sys.argv[6]} cores")
print(f"shared prefix of {sys.argv[7]} tokens + 20 words each"
      f" ({cold['requests']} requests at concurrency {cold['concurrency']}):")
print("  run    TTFT p50 ms  TTFT p99 ms  prompt tokens  from cache")
for name, r in (("cold", cold), ("warm", warm)):
    print(f"  {name:5} {r['ttft_s']['p50'] * 1e3:12.1f} {r['ttft_s']['p99'] * 1e3:12.1f}"
          f" {r['prompt_tokens']:14d} {r['cached_tokens']:11d}")
p50 = warm["ttft_s"]["p50"] / cold["ttft_s"]["p50"]
print(f"  TTFT p50 warm / cold = {p50:.4f} (1/{1 / p50:.1f}; target <= 1/15)")
print(f"chat ({chat_on['concurrency']} conversations, {chat_on['requests']} turns in all):")
for name, r in (("reuse off", chat_off), ("reuse on", chat_on)):
    computed = r["prompt_tokens"] - r["cached_tokens"]
    print(f"  {name:9}: {r['prompt_tokens']} prompt tokens sent, {computed} computed"
          f" ({computed / r['prompt_tokens']:.3f} of sent); TTFT p50 {r['ttft_s']['p50'] * 1e3:.1f} ms")
computed = chat_on["prompt_tokens"] - chat_on["cached_tokens"]
print(f"  computed / sent with reuse = {computed / chat_on['prompt_tokens']:.3f} (target <= 0.25)")
if llama_warm:
    print("llama-server, the same shared-prefix load:")
    print("  run    TTFT p50 ms  TTFT p99 ms  prompt tokens  computed")
    for name, r in (("cold", llama_cold), ("warm", llama_warm)):
        print(f"  {name:5} {r['ttft_s']['p50'] * 1e3:12.1f} {r['ttft_s']['p99'] * 1e3:12.1f}"
              f" {r['prompt_tokens_sum']:14d} {r['prompt_processed_sum']:9d}")
    print(f"  TTFT p50 warm, hearth / llama-server = "
          f"{warm['ttft_s']['p50'] / llama_warm['ttft_s']['p50']:.3f} (target <= 1);"
          f" cold: {cold['ttft_s']['p50'] / llama_cold['ttft_s']['p50']:.3f}")
EOF
