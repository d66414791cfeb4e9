#!/usr/bin/env bash
# hearth beside llama.cpp on the same GGUF files, in one run: prefill and
# single-stream decode tokens/s of each, and hearth / llama.cpp.
#
#   bench/compare_llama_cpp.sh --llama-bench PATH [options]     (--help lists them)
#
# llama.cpp is not part of hearth: build it yourself (outside this
# repository) and give this script its llama-bench binary (ik_llama.cpp's
# works too, with --llama-args "-rtr 1" for its repacked layouts). The models are
# the TinyLlama 1.1B shape that bench_engine calls (b) (2048 wide, 22 layers,
# 32 heads, 4 KV heads, FFN 5632, vocab 32000, synthetic weights), written by
# `hearth-model synth` once per type into --models-dir (the same files
# bench/server/batching.sh uses).
#
# hearth: `hearth-generate --json` (one process per run: load, prefill the
# prompt, decode --tokens tokens; EOS ignored, greedy), its own prefill and
# decode rates, the median of --reps runs. llama.cpp: `llama-bench -p P -n N
# -r REPS` with P = the number of prompt tokens hearth's tokenizer made of the
# prompt (BOS included), N = --tokens, the same thread count; its average.
# The streaming read bandwidth measured by bench_kernels is printed first:
# decode is bound by it, so compare ratios measured in the same run. Run on an
# otherwise idle machine.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/compare_llama_cpp.sh --llama-bench PATH [options]

  --llama-bench PATH    llama.cpp's llama-bench binary (required)
  --llama-args "ARGS"   more arguments for llama-bench (e.g. "-rtr 1" for ik_llama.cpp's
                        run-time repacking)
  --build DIR           hearth build tree (default build/release)
  --types "q8_0 q4_0"   weight types (default both)
  --threads T           threads of both (default 2)
  --tokens N            generated tokens per run (default 64)
  --prompt-words W      the prompt: W repetitions of "hello" (default 64, ~130 tokens)
  --reps R              runs of each (default 3)
  --models-dir DIR      where the synthesized models are kept (default /tmp/hearth-batching-models)
EOF
}

llama_bench=
llama_args=
build=build/release
types="q8_0 q4_0"
threads=2
tokens=64
prompt_words=64
reps=3
models_dir=/tmp/hearth-batching-models
need() { [ $# -ge 2 ] || { echo "compare_llama_cpp.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bench) need "$@"; llama_bench=$2; shift 2 ;;
    --llama-args) need "$@"; llama_args=$2; shift 2 ;;
    --build) need "$@"; build=$2; shift 2 ;;
    --types) need "$@"; types=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --tokens) need "$@"; tokens=$2; shift 2 ;;
    --prompt-words) need "$@"; prompt_words=$2; shift 2 ;;
    --reps) need "$@"; reps=$2; shift 2 ;;
    --models-dir) need "$@"; models_dir=$2; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "compare_llama_cpp.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ -n "$llama_bench" ] || { echo "compare_llama_cpp.sh: --llama-bench PATH is required" >&2; usage >&2; exit 2; }
# --llama-args as words (split on spaces, no globbing).
read -ra llama_extra <<< "$llama_args"
[ -x "$llama_bench" ] || { echo "compare_llama_cpp.sh: $llama_bench is not an executable" >&2; exit 2; }
for p in tools/hearth-generate tools/hearth-model bench/bench_kernels; do
  [ -x "$build/$p" ] || { echo "compare_llama_cpp.sh: $build/$p is missing (build hearth first)" >&2; exit 2; }
done
py=/usr/bin/python3
[ -x "$py" ] || py=python3

prompt=$(printf 'hello %.0s' $(seq 1 "$prompt_words"))
# shellcheck source=bench/synth_model.sh
. "$(dirname "$0")/synth_model.sh"

echo "=== hearth vs $llama_bench $llama_args: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%M:%SZ), $threads threads, $reps runs each"
"$build/bench/bench_kernels" --benchmark_filter='^$' 2>/dev/null | grep '^streaming read bandwidth,' | sed 's/^/    /'
printf '%-6s %8s %14s %14s %8s %14s %14s %8s\n' type prompt "hearth pp t/s" "llama pp t/s" ratio \
  "hearth tg t/s" "llama tg t/s" ratio

for type in $types; do
  model=$(synth_model "$build" "$TINYLLAMA_SHAPE" "$type" "b-tinyllama-1.1B-$type.gguf" \
    "$models_dir") || exit 1
  # hearth: the summary line of each run -> "prompt_tokens prefill decode".
  runs=()
  for _ in $(seq 1 "$reps"); do
    runs+=("$("$build/tools/hearth-generate" --model "$model" --prompt "$prompt" --max-tokens "$tokens" \
      --ignore-eos --threads "$threads" --json 2>/dev/null | tail -n 1 |
      "$py" -c 'import json,sys; s=json.load(sys.stdin)["stats"]; print(s["prompt_tokens"], s["prefill_tokens_per_s"], s["decode_tokens_per_s"])')")
  done
  read -r n_prompt hearth_pp hearth_tg < <(printf '%s\n' "${runs[@]}" | "$py" -c '
import statistics, sys
rows = [l.split() for l in sys.stdin if l.strip()]
print(rows[0][0], statistics.median(float(r[1]) for r in rows), statistics.median(float(r[2]) for r in rows))')
  # llama.cpp on the same file, the same prompt length and thread count.
  read -r llama_pp llama_tg < <("$llama_bench" -m "$model" -p "$n_prompt" -n "$tokens" -t "$threads" \
      -r "$reps" "${llama_extra[@]}" -o json 2>/dev/null | "$py" -c '
import json, sys
pp = tg = float("nan")
for t in json.load(sys.stdin):
    if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0: pp = t["avg_ts"]
    if t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0: tg = t["avg_ts"]
print(pp, tg)')
  "$py" - "$type" "$n_prompt" "$hearth_pp" "$llama_pp" "$hearth_tg" "$llama_tg" <<'PY'
import sys
t, n, hp, lp, ht, lt = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
print("%-6s %8s %14.1f %14.1f %7.2fx %14.2f %14.2f %7.2fx" % (t, n, hp, lp, hp / lp, ht, lt, ht / lt))
PY
done
