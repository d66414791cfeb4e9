#!/usr/bin/env bash
# Builds the libFuzzer targets (in the "asan" preset's tree: clang-14, ASan +
# UBSan, where the suites are built too) and runs each for a bounded time. Any crash, leak, timeout (>10 s on one input) or
# out-of-memory fails the run; the failing input is kept under build/asan/fuzz/artifacts/
# and belongs in tests/fuzz/regressions/<target>/ once fixed (those inputs are
# replayed first on every run).
#
#   tests/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET]      (default 60)
#
# The tokenizer target runs once per vocabulary: the `llama` and `gpt2`
# reference vocabularies from ../shared when present, else the synthetic demo.
# libFuzzer runs one thread, so the runs go in parallel, one per core: each
# still gets its full time on a core of its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shared=${HEARTH_SHARED_DIR:-../shared}
say() { printf '\033[1m[fuzz]\033[0m %s\n' "$*"; }

say "building the fuzz targets in build/asan (clang-14)"
cmake --preset asan -G Ninja >/dev/null
cmake --build build/asan --target gguf_fuzz tokenizer_fuzz request_validation_fuzz chat_template_fuzz \
  grammar_fuzz openai_request_fuzz

mkdir -p build/asan/fuzz/artifacts build/asan/fuzz/summary
rm -f build/asan/fuzz/summary/*
# fuzz NAME TARGET SEED_DIR [VOCAB]: one bounded run; its summary line goes to
# build/asan/fuzz/summary/NAME.
fuzz() {
  local name=$1 target=$2 seeds=$3 vocab=${4:-}
  local work=build/asan/fuzz/corpus/$name regress=tests/fuzz/regressions/$target
  mkdir -p "$work"
  local env=()
  [ -n "$vocab" ] && env=(HEARTH_FUZZ_VOCAB="$vocab")
  if [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ]; then
    say "$name: replaying $(ls "$regress" | wc -l) regression inputs"
    env "${env[@]}" "build/asan/tests/fuzz/$target" "$regress"/* >/dev/null 2>&1 ||
      { echo "regression input failed again: $regress" >&2; exit 1; }
  fi
  say "$name: fuzzing for ${seconds} s"
  local log=build/asan/fuzz/$name.log
  if ! env "${env[@]}" "build/asan/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build/asan/fuzz/artifacts/"$name"- \
      "$work" "$seeds" >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz target $name FAILED: see $log and build/asan/fuzz/artifacts/" >&2
    exit 1
  fi
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  printf '%-28s %12s executions in %s s, corpus %s files\n' "$name" "$execs" "$seconds" \
    "$(ls "$work" | wc -l)" >"build/asan/fuzz/summary/$name"
}

# Stopped (SIGTERM from hearth.sh, or Ctrl-C), the running targets stop too:
# each is a child of a background fuzz() subshell.
stop_targets() {
  trap - TERM INT
  for job in $(jobs -p); do
    pkill -TERM -P "$job" 2>/dev/null || true  # (procps; without it the target runs out its time)
    kill -TERM "$job" 2>/dev/null || true
  done
  exit 143
}
trap stop_targets TERM INT

# run NAME TARGET SEED_DIR [VOCAB]: starts fuzz in the background once a core
# is free; finish waits for the rest. A failed run fails the script.
cores=$(nproc)
failed=0
running=0
run() {
  if [ "$running" -ge "$cores" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz "$@" &
  running=$((running + 1))
}
finish() {
  while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
  done
}

run gguf gguf_fuzz tests/fuzz/corpus/gguf
if [ -f "$shared/reference/tokenizer/ggml-vocab-llama-spm.gguf" ]; then
  run tokenizer-llama-spm tokenizer_fuzz tests/fuzz/corpus/tokenizer "$shared/reference/tokenizer/ggml-vocab-llama-spm.gguf"
  run tokenizer-gpt-2 tokenizer_fuzz tests/fuzz/corpus/tokenizer "$shared/reference/tokenizer/ggml-vocab-gpt-2.gguf"
elif [ -n "${CI:-}" ] && [ "$CI" != false ] && [ "$CI" != 0 ]; then
  echo "run_fuzzers.sh: $shared/reference is absent under CI, which always has it" >&2
  exit 1
else
  say "$shared/reference absent: fuzzing the tokenizer on the synthetic demo vocabulary only"
  run tokenizer-demo tokenizer_fuzz tests/fuzz/corpus/tokenizer
fi
run request-validation request_validation_fuzz tests/fuzz/corpus/request
run chat-template chat_template_fuzz tests/fuzz/corpus/chat_template
run grammar grammar_fuzz tests/fuzz/corpus/grammar
run openai-request openai_request_fuzz tests/fuzz/corpus/openai_request
finish

if [ "$failed" -ne 0 ]; then
  echo "run_fuzzers.sh: a fuzz target failed (its log is printed above)" >&2
  exit 1
fi
say "all fuzz targets ran clean"
cat build/asan/fuzz/summary/*
