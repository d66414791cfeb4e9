#!/usr/bin/env bash
# Batching: what concurrent streams cost each other. One hearth-server (16 warm
# instances, 2 kernel threads by default) on 127.0.0.1 takes `hearth bench`
# load at 1, 2, 4, 8 and 16 concurrent streams; every request has the same
# short prompt and generates exactly --max-tokens tokens (EOS ignored, greedy).
# Each level first runs one unmeasured round (--warmup-per-stream requests per
# stream, at that concurrency), then the measured one.
#
#   bench/server/batching.sh [options]          (--help lists them)
#
# Printed per level, all measured by the client:
#   agg tok/s      tokens received by all streams / wall time of the level
#   x 1-stream     agg tok/s / agg tok/s of the 1-stream level of this run: the
#                  batching gain (N streams served one at a time would give
#                  ~1.0; a perfect batched step, N.0)
#   stream tok/s   per-stream decode speed (tokens after the first / time from
#                  the first to the last token), the mean over requests
#   TTFT p50/p99   request sent -> first token (queueing + prefill)
#   ITL p50/p99    gaps between consecutive tokens of a stream
#   p99 ITL / 1-stream p50
#                  the worst-case stall a stream sees at this load, in units of
#                  one undisturbed decode step
# Percentiles are nearest rank (a measured value).
#
# --long-prompts: the levels 1 and 8 (or --streams), then 8 streams again with
# --long-prompt-fraction of the requests carrying a ~512-token prompt; printed:
# the TTFT of the long-prompt requests apart from the others, the ITL of the
# other streams (all their gaps, and only the gaps that overlap a long
# prefill), and p99 ITL of the others over the 1-stream and the same-streams
# p50: how long one long prefill stalls the streams decoding beside it.
#
# --llama-server PATH: the same load against llama.cpp's llama-server on the
# same GGUF file, measured by bench/server/batching_load.py (same prompt words,
# same long-prompt choices, same statistics): one llama-server per level with
# -np = streams, -c = np x the per-stream context, -t/-tb = --kernel-threads,
# --cache-ram 0 and "cache_prompt": false (every request prefills its whole
# prompt, as hearth's do: `hearth bench --no-prefix-reuse`), KV cache q8_0 with flash attention (hearth's KV
# cache is int8; --llama-kv f16 for llama.cpp's default), then a table of
# hearth / llama-server per level. hearth serves every level from one server
# (16 instances; unused ones cost nothing), llama-server is started per level
# because its slot count is fixed at start.
#
# The default model is the TinyLlama 1.1B shape that bench_engine calls (b)
# (2048 wide, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000,
# synthetic weights), made with `hearth-model synth` once and kept in
# --models-dir. The client shares the machine's cores with the server (both
# sides alike); run it on an otherwise idle machine. Every process it starts
# is stopped by PID on exit; everything listens on 127.0.0.1 only.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/server/batching.sh [options]

  --build DIR              hearth build tree (default build/release)
  --model PATH             GGUF model (default: synthesize the TinyLlama shape, see --type)
  --type q8_0|q4_0         weight type of the synthesized model (default q8_0)
  --synth "FLAGS"          hearth-model synth shape flags instead of the TinyLlama shape
  --models-dir DIR         where synthesized models are kept (default /tmp/hearth-batching-models)
  --streams "1 2 4 8 16"   concurrency levels (default; with --long-prompts "1 8")
  --max-tokens K           generated tokens per request (default 64)
  --prompt-tokens P        prompt of at most P tokens, as many of `hearth bench --prompt-tokens`'s
                           words as fit (hearth's tokenizer, BOS included; default 32)
  --requests-per-stream R  measured requests per level = R x streams (default 3)
  --min-requests N         ... but at least N (default 4)
  --warmup-per-stream W    unmeasured requests per stream before each level (default 1)
  --instances N            hearth instances (default 16)
  --queue N                hearth queue (default 16)
  --kernel-threads T       hearth --kernel-threads and llama-server -t/-tb (default 2)
  --step-tokens N          hearth --step-tokens (passed only when given)
  --hearth-args "ARGS"     more hearth-server flags
  --long-prompts           the long-prompt mode (see the header of this script)
  --long-streams N         streams of the long-prompt run (default 8)
  --long-prompt-fraction F (default 0.25)
  --long-prompt-tokens L   tokens of a long prompt, counted the same way (default 512)
  --long-requests-per-stream R  (default 4)
  --mix-seed S             which requests get long prompts (default 1)
  --llama-server PATH      also run llama.cpp's llama-server on the same model
  --llama-kv q8_0|f16      its KV cache type (default q8_0, with -fa on)
  --llama-args "ARGS"      more llama-server flags
  --no-hearth              only llama-server (needs --llama-server)
  --prefill-reference      also run bench_engine's prefill of the same shape, type and threads
                           right after hearth's levels, and print each level's aggregate as a
                           share of it (default: on for the synthesized TinyLlama shape at 1
                           or 2 kernel threads when bench_engine is built)
  --no-prefill-reference   skip it
  --run-timeout-s S        bound of one measured or warmup run (default 1800)
  --out FILE               also write the raw results (JSON lines) there
  -h, --help
EOF
}

build=build/release
model=
type=q8_0
synth=
models_dir=/tmp/hearth-batching-models
streams=
max_tokens=64
prompt_tokens=32
rps=3
min_requests=4
warmup_ps=1
instances=16
queue=16
kernel_threads=2
step_tokens=
hearth_args=
long_mode=0
long_streams=8
long_fraction=0.25
long_tokens=512
long_rps=4
mix_seed=1
llama=
llama_kv=q8_0
llama_args=
run_hearth=1
run_timeout=1800
out=
prefill_ref=auto

die() { echo "batching.sh: $*" >&2; exit 2; }
need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) need "$@"; build=$2; shift 2 ;;
    --model) need "$@"; model=$2; shift 2 ;;
    --type) need "$@"; type=$2; shift 2 ;;
    --synth) need "$@"; synth=$2; shift 2 ;;
    --models-dir) need "$@"; models_dir=$2; shift 2 ;;
    --streams) need "$@"; streams=$2; shift 2 ;;
    --max-tokens) need "$@"; max_tokens=$2; shift 2 ;;
    --prompt-tokens) need "$@"; prompt_tokens=$2; shift 2 ;;
    --requests-per-stream) need "$@"; rps=$2; shift 2 ;;
    --min-requests) need "$@"; min_requests=$2; shift 2 ;;
    --warmup-per-stream) need "$@"; warmup_ps=$2; shift 2 ;;
    --instances) need "$@"; instances=$2; shift 2 ;;
    --queue) need "$@"; queue=$2; shift 2 ;;
    --kernel-threads) need "$@"; kernel_threads=$2; shift 2 ;;
    --step-tokens) need "$@"; step_tokens=$2; shift 2 ;;
    --hearth-args) need "$@"; hearth_args=$2; shift 2 ;;
    --long-prompts) long_mode=1; shift ;;
    --long-streams) need "$@"; long_streams=$2; shift 2 ;;
    --long-prompt-fraction) need "$@"; long_fraction=$2; shift 2 ;;
    --long-prompt-tokens) need "$@"; long_tokens=$2; shift 2 ;;
    --long-requests-per-stream) need "$@"; long_rps=$2; shift 2 ;;
    --mix-seed) need "$@"; mix_seed=$2; shift 2 ;;
    --llama-server) need "$@"; llama=$2; shift 2 ;;
    --llama-kv) need "$@"; llama_kv=$2; shift 2 ;;
    --llama-args) need "$@"; llama_args=$2; shift 2 ;;
    --no-hearth) run_hearth=0; shift ;;
    --prefill-reference) prefill_ref=1; shift ;;
    --no-prefill-reference) prefill_ref=0; shift ;;
    --run-timeout-s) need "$@"; run_timeout=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for v in max_tokens prompt_tokens rps min_requests warmup_ps instances queue kernel_threads \
         long_streams long_tokens long_rps mix_seed run_timeout; do
  is_uint "${!v}" || die "--${v//_/-}: '${!v}' is not a whole number"
done
[ -z "$step_tokens" ] || is_uint "$step_tokens" || die "--step-tokens: '$step_tokens' is not a whole number"
[ -n "$streams" ] || { if [ "$long_mode" = 1 ]; then streams="1 $long_streams"; else streams="1 2 4 8 16"; fi; }
for n in $streams; do
  if ! is_uint "$n" || [ "$n" -lt 1 ]; then die "--streams: '$n' is not a positive number"; fi
done
case "$type" in q8_0|q4_0) ;; *) die "--type: '$type' is not q8_0 or q4_0" ;; esac
case "$llama_kv" in q8_0|f16) ;; *) die "--llama-kv: '$llama_kv' is not q8_0 or f16" ;; esac
[ "$run_hearth" = 1 ] || [ -n "$llama" ] || die "--no-hearth needs --llama-server"
[ -z "$llama" ] || [ -x "$llama" ] || die "--llama-server: '$llama' is not an executable"
for bin in server/hearth-server tools/hearth tools/hearth-model; do
  [ -x "$build/$bin" ] || die "$build/$bin is missing: build it (cmake --build $build --target hearth-server hearth hearth-model)"
done
# bench_engine's (b) models are the default synthesized shape, at 1 or 2 threads.
if [ "$prefill_ref" != 0 ]; then
  why=
  [ -z "$model" ] && [ -z "$synth" ] || why="it has only the synthesized TinyLlama shape (no --model, --synth)"
  [ "$kernel_threads" = 1 ] || [ "$kernel_threads" = 2 ] || why="it runs 1 or 2 threads only"
  [ "$run_hearth" = 1 ] || why="hearth is not run"
  [ -x "$build/bench/bench_engine" ] || why="$build/bench/bench_engine is missing (cmake --build $build --target bench_engine)"
  if [ -n "$why" ]; then
    [ "$prefill_ref" = auto ] || die "--prefill-reference: $why"
    prefill_ref=0
  else
    prefill_ref=1
  fi
fi
for n in $streams; do
  [ "$run_hearth" = 0 ] || [ "$n" -le "$instances" ] ||
    echo "batching.sh: note: $n streams > $instances instances: the rest wait in the queue" >&2
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
helper=$here/batching_load.py
work=$(mktemp -d)
results=$work/results.jsonl
pids=()

# Stops a process this script started: SIGTERM, then SIGKILL after 20 s.
stop_pid() {
  local pid=$1
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || true
}
# Stops it and drops it from `pids` (a PID that has been waited for may be reused).
stop_and_forget() {
  local pid=$1 p kept=()
  stop_pid "$pid"
  for p in "${pids[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
  pids=("${kept[@]}")
}
cleanup() {
  local pid
  for pid in "${pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Runs a command in the background and waits for it, so that a signal reaches
# the traps at once (bash runs a trap only after a foreground command ends).
bg() {
  "$@" &
  local pid=$! rc=0
  pids+=("$pid")
  wait "$pid" || rc=$?
  stop_and_forget "$pid"
  return "$rc"
}

read -r load1 _ </proc/loadavg
if "$py" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 * int(sys.argv[2]) else 1)' "$load1" "$(nproc)"; then
  echo "batching.sh: warning: load average $load1 on $(nproc) cores: the figures will be noisy," \
       "llama-server's far more than hearth's (its threads spin at each barrier and stall when a core is taken)" >&2
fi

# --- the model -------------------------------------------------------------
# shellcheck source=bench/synth_model.sh
. "$(dirname "$0")/../synth_model.sh"
if [ -z "$model" ]; then
  shape=${synth:-$TINYLLAMA_SHAPE}
  if [ -z "$synth" ]; then
    name=b-tinyllama-1.1B-$type.gguf
  else
    name=synth-$type-$(printf '%s' "$shape" | md5sum | cut -c1-10).gguf
  fi
  model=$(synth_model "$build" "$shape" "$type" "$name" "$models_dir") || exit 1
  model_desc="$model (synthetic: $shape --type $type)"
else
  [ -r "$model" ] || die "--model: cannot read '$model'"
  model_desc=$model
fi

# shellcheck source=bench/server/prompt_words.sh
. "$here/prompt_words.sh"
prompt_words=$(words_for "$prompt_tokens")
prompt_ntok=$(count_tokens "$prompt_words")
longest=$prompt_ntok
long_words=$long_tokens
long_ntok=0
if [ "$long_mode" = 1 ]; then
  long_words=$(words_for "$long_tokens")
  long_ntok=$(count_tokens "$long_words")
  [ "$long_ntok" -le "$longest" ] || longest=$long_ntok
fi
# KV positions per stream: the longest prompt + the generated tokens + a margin,
# rounded up to 256; the same for hearth's instances and llama-server's slots.
ctx=$(( (longest + max_tokens + 16 + 255) / 256 * 256 ))

json_merge() {  # json_merge SERVER MODE STREAMS JSON -> one results line
  "$py" -c 'import json,sys
d=json.loads(sys.argv[4]); d.update(server=sys.argv[1], mode=sys.argv[2], streams=int(sys.argv[3]))
print(json.dumps(d))' "$@"
}
brief() {  # brief RESULTS_LINE: one progress line
  "$py" -c 'import json,sys
d=json.loads(sys.argv[1])
print("  %-12s %-5s %2d streams: %7.1f tok/s aggregate, %6.1f tok/s per stream, TTFT p50 %.1f ms, ITL p50 %.1f / p99 %.1f ms, %d of %d ok" % (
  d["server"], d["mode"], d["streams"], d["tokens_per_s"], d["stream_decode_tokens_per_s"],
  d["ttft_s"]["p50"]*1e3, d["itl_s"]["p50"]*1e3, d["itl_s"]["p99"]*1e3, d["ok"], d["requests"]))' "$1"
}

# run_level SERVER MODE STREAMS: one warmup round and one measured run against
# the running server (hearth at $hearth_addr, llama-server at $llama_port).
run_level() {
  local server=$1 mode=$2 n=$3 requests warm extra=() json rc
  if [ "$mode" = long ]; then
    requests=$(( n * long_rps ))
    extra=(--long-prompt-fraction "$long_fraction" --long-prompt-tokens "$long_words" --mix-seed "$mix_seed")
  else
    requests=$(( n * rps ))
  fi
  [ "$requests" -ge "$min_requests" ] || requests=$min_requests
  warm=$(( n * warmup_ps ))
  client() {  # client REQUESTS: the summary JSON in $work/run.json
    if [ "$server" = hearth ]; then
      bg timeout "$run_timeout" "$build/tools/hearth" bench --server "$hearth_addr" --model bench \
        --timeout-s "$run_timeout" --concurrency "$n" --requests "$1" --prompt-tokens "$prompt_words" \
        --max-tokens "$max_tokens" --ignore-eos --no-prefix-reuse --json --quiet "${extra[@]}" \
        >"$work/run.json" 2>>"$work/client.log"
    else
      bg timeout "$run_timeout" "$py" "$helper" load --port "$llama_port" --timeout-s "$run_timeout" \
        --deadline-s "$run_timeout" --concurrency "$n" --requests "$1" --prompt-tokens "$prompt_words" \
        --max-tokens "$max_tokens" "${extra[@]}" >"$work/run.json" 2>>"$work/client.log"
    fi
  }
  local what
  for what in warmup run; do
    if [ "$what" = warmup ]; then
      [ "$warm" -gt 0 ] || continue
      rc=0; client "$warm" || rc=$?
    else
      rc=0; client "$requests" || rc=$?
    fi
    # A run with failed requests still prints its summary (exit 1); no summary is fatal.
    json=$(tail -n 1 "$work/run.json")
    if [ -z "$json" ]; then
      echo "batching.sh: $server $mode $what at $n streams failed (exit $rc)" >&2
      tail -n 20 "$work/client.log" >&2
      exit 1
    fi
  done
  local line
  line=$(json_merge "$server" "$mode" "$n" "$json")
  printf '%s\n' "$line" >>"$results"
  brief "$line"
}

# Every level once (ascending, unique), the long run after the level of its width.
all_levels=$streams
[ "$long_mode" = 0 ] || all_levels="$all_levels $long_streams"
# shellcheck disable=SC2086
levels=$(printf '%s\n' $all_levels | sort -n -u | tr '\n' ' ')
in_list() { local x; for x in $2; do [ "$x" = "$1" ] && return 0; done; return 1; }
run_levels() {  # run_levels SERVER [N]: the plain and long runs of level N (all when absent)
  local server=$1 n
  for n in ${2:-$levels}; do
    in_list "$n" "$streams" && run_level "$server" plain "$n"
    [ "$long_mode" = 1 ] && [ "$n" = "$long_streams" ] && run_level "$server" long "$n"
    true
  done
}

# --- bench_engine's prefill, the reference of the aggregate ----------------
# measure_prefill: sets prefill_after to bench_engine's prefill tokens/s for
# this type at $kernel_threads threads (its summary line), measured now. Not
# called in $(...): the subshell's `bg` would record bench_engine's PID where
# cleanup never sees it, and Ctrl-C left bench_engine running.
measure_prefill() {
  local log=$work/bench_engine.log rate
  bg "$build/bench/bench_engine" --benchmark_filter="^BM_Model/b_$type/$kernel_threads/" \
    >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "bench_engine failed"; }
  rate=$(sed -n 's/^model b-tinyllama.* prefill \([0-9.]*\) tok\/s.*/\1/p' "$log" | head -n 1)
  [ -n "$rate" ] || { tail -n 20 "$log" >&2; die "bench_engine printed no prefill figure"; }
  prefill_after=$rate
}
prefill_after=

# --- hearth ----------------------------------------------------------------
hearth_desc="not run"
if [ "$run_hearth" = 1 ]; then
  args=(--model bench="$model" --instances "$instances" --queue "$queue" --kernel-threads "$kernel_threads"
        --context "$ctx" --listen 127.0.0.1:0 --metrics-listen off)
  [ -z "$step_tokens" ] || args+=(--step-tokens "$step_tokens")
  # shellcheck disable=SC2206
  [ -z "$hearth_args" ] || args+=($hearth_args)
  hearth_desc="hearth-server ${args[*]:2}"
  echo "batching.sh: starting hearth-server (${args[*]:2})" >&2
  "$build/server/hearth-server" "${args[@]}" >"$work/hearth.ready" 2>"$work/hearth.log" &
  hearth_pid=$!
  pids+=("$hearth_pid")
  for _ in $(seq 1 3000); do  # 300 s
    grep -q '^hearth-server ready' "$work/hearth.ready" 2>/dev/null && break
    kill -0 "$hearth_pid" 2>/dev/null || { tail -n 30 "$work/hearth.log" >&2; die "hearth-server exited during startup"; }
    sleep 0.1
  done
  grep -q '^hearth-server ready' "$work/hearth.ready" || die "hearth-server not ready after 300 s"
  hearth_addr=$(sed -n 's/^hearth-server ready grpc=\([^ ]*\).*/\1/p' "$work/hearth.ready")
  case "$hearth_addr" in 127.0.0.1:*) ;; *) die "hearth-server listens on '$hearth_addr', not 127.0.0.1" ;; esac
  run_levels hearth
  stop_and_forget "$hearth_pid"
  # After the levels, not before: a run just before the server started left
  # the 1-stream level's ITL p99 at 48-52 ms against 22 without it (three
  # runs each way, 2026-12-05), the machine still settling from it.
  if [ "$prefill_ref" = 1 ]; then
    echo "batching.sh: bench_engine prefill (b_$type, $kernel_threads threads), after hearth's levels" >&2
    measure_prefill || exit 1
  fi
fi

# --- llama-server ----------------------------------------------------------
llama_desc="not run"
if [ -n "$llama" ]; then
  llama_version=$("$llama" --version 2>&1 | grep -m1 -i 'version' || true)
  # Older llama-servers (before late 2025) have no -fit or --cache-ram, and
  # take -fa without a value: pass what this one knows.
  llama_help=$("$llama" --help 2>&1 || true)
  lflags=(-t "$kernel_threads" -tb "$kernel_threads" -ctk "$llama_kv" -ctv "$llama_kv")
  if grep -qE -- '(^|[ ,])-fit([ ,]|$)' <<<"$llama_help"; then lflags+=(-fit off); fi
  if grep -q -- '--cache-ram' <<<"$llama_help"; then lflags+=(--cache-ram 0); fi
  if [ "$llama_kv" = q8_0 ]; then  # a quantized V cache needs flash attention
    if grep -q -- '--flash-attn \[on|off|auto\]\|--flash-attn FA' <<<"$llama_help"; then
      lflags+=(-fa on)
    else
      lflags+=(-fa)
    fi
  fi
  # shellcheck disable=SC2206
  [ -z "$llama_args" ] || lflags+=($llama_args)
  llama_desc="$llama ($llama_version): -np STREAMS -c STREAMS*$ctx ${lflags[*]}"
  for n in $levels; do
    llama_port=$("$py" "$helper" free-port)
    echo "batching.sh: starting llama-server -np $n on 127.0.0.1:$llama_port" >&2
    "$llama" -m "$model" --host 127.0.0.1 --port "$llama_port" -np "$n" -c $(( n * ctx )) "${lflags[@]}" \
      >"$work/llama-$n.log" 2>&1 &
    llama_pid=$!
    pids+=("$llama_pid")
    bg "$py" "$helper" wait-http "$llama_port" "$llama_pid" 300 ||
      { tail -n 30 "$work/llama-$n.log" >&2; die "llama-server -np $n did not become ready"; }
    run_levels llama-server "$n"
    stop_and_forget "$llama_pid"
  done
fi

# --- the report ------------------------------------------------------------
meta=$("$py" -c 'import json,sys; a=sys.argv
m = {"title": a[1], "model": a[2], "prompt": a[3], "load": a[4], "hearth": a[5],
     "llama-server": a[6], "long_prompt_tokens": a[7]}
if a[8]:
    m["prefill_reference"] = {"tok_s": float(a[8]), "threads": int(a[9])}
print(json.dumps({"meta": m}))' \
  "$(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ), load average at start $load1" "$model_desc" \
  "$prompt_words words = $prompt_ntok tokens (hearth's tokenizer, BOS included)$([ "$long_mode" = 1 ] && echo "; long: $long_words words = $long_ntok tokens, fraction $long_fraction of the long run, mix seed $mix_seed")" \
  "$max_tokens generated tokens per request (EOS ignored, greedy); requests per level $rps x streams (at least $min_requests)$([ "$long_mode" = 1 ] && echo ", long run $long_rps x streams"); warmup $warmup_ps x streams; $ctx KV positions per stream" \
  "$hearth_desc" "$llama_desc" "$long_ntok" "$prefill_after" "$kernel_threads")
{ printf '%s\n' "$meta"; cat "$results"; } >"$work/all.jsonl"
[ -z "$out" ] || cp "$work/all.jsonl" "$out"
"$py" "$helper" report "$work/all.jsonl"
