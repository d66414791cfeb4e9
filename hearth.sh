#!/usr/bin/env bash
# hearth's two front-door commands on a fresh Debian 12 machine:
#
#   ./hearth.sh serve   install missing Debian packages, build (Release), start hearth
#   ./hearth.sh test    install missing Debian packages, build, run the whole test suite
#
# Both are idempotent: packages already installed are not touched, and build
# trees are reused. Every step prints what it does.
set -euo pipefail
cd "$(dirname "$0")"

# Every Debian package the build, tests and benchmarks use.
PACKAGES=(
  cmake ninja-build g++ pkg-config
  libabsl-dev libspdlog-dev
  libxnnpack-dev libpthreadpool-dev libcpuinfo-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev
  python3-grpcio python3-grpc-tools python3-jinja2  # jinja2: the chat template conformance test
  python3-jsonschema  # validates structured output independently of hearth
  python3-regex  # makes the tekken/gpt-4o pre-tokenizer reference data (tests/support)
  python3-numpy  # the float reference forward and K-quant reference data (tests/support)
  nlohmann-json3-dev
  libcpp-httplib-dev  # the OpenAI-compatible HTTP front end
  clang-14 libclang-rt-14-dev
  prometheus openssl curl
  docker-compose  # validates deploy/docker-compose.yml (no daemon needed)
)
# npm runs the dashboard and manifest checks; any npm on PATH will do,
# otherwise Debian's.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

say() { printf '\033[1m[hearth]\033[0m %s\n' "$*"; }

install_missing_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "all ${#PACKAGES[@]} Debian packages already installed"
    return
  fi
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing missing Debian packages: ${missing[*]}"
  "${sudo[@]}" apt-get update -q
  # Through env: sudo's env_reset would drop a variable set before it.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# build PRESET [TARGET...]
build() {
  local preset=$1; shift
  say "configuring build/$preset (cmake --preset $preset)"
  cmake --preset "$preset" -G Ninja >/dev/null
  say "building build/$preset"
  # One compile job per core: ninja's default (cores + 1 here) ran three
  # compilers on two cores, and each build took longer (docs/ci-time.md).
  cmake --build "build/$preset" -j "$(nproc)" ${1:+--target "$@"}
}

# run_tests PRESET [CTEST ARGS...]; each run leaves a JUnit file that
# skip_summary (the last step of `test`) reads.
JUNIT_FILES=()
run_tests() {
  local preset=$1; shift
  local junit=$PWD/build/$preset/ctest-junit.xml
  say "running tests in build/$preset (ctest --preset $preset $*)"
  JUNIT_FILES+=("$junit")
  # Twice as many tests as cores: many tests spend their time waiting on a
  # server's events (deadlines, drains, streams), which leaves a core idle;
  # no test has a wall-clock bound, so sharing the cores only slows them.
  ctest --preset "$preset" -j "$(($(nproc) * 2))" --output-junit "$junit" "$@"
}

# How many tests were skipped, and why (a missing ../shared fails instead
# under CI: tests/support/shared_data.h).
skip_summary() {
  say "skipped tests"
  python3 tests/support/skip_summary.py "${JUNIT_FILES[@]}"
}

case "${1:-}" in
  serve)
    install_missing_packages
    build release
    # With no --model, hearth-server serves its built-in synthetic demo model
    # (random weights: the text is meaningless; every code path is real).
    # Extra arguments go to the server: ./hearth.sh serve --model NAME=FILE.gguf
    say "starting hearth-server on 0.0.0.0:50051 (gRPC) and 0.0.0.0:9464 (/metrics); Ctrl-C stops it"
    say "try: build/release/tools/hearth generate --prompt 'hello hearth'"
    shift
    exec build/release/server/hearth-server "$@"
    ;;
  test)
    install_missing_packages
    build release
    run_tests release
    # Everything again under ASan+UBSan; the threaded suites (label "tsan")
    # under ThreadSanitizer.
    build asan
    run_tests asan
    build tsan hearth_tsan_tests
    # The libFuzzer targets (clang-14, ASan+UBSan, a bounded time each) run
    # beside the TSan suite: they are CPU-bound, while the TSan suite's
    # server tests mostly wait on events. Their report follows the suite's.
    fuzz_log=build/asan/fuzz/run_fuzzers.log
    mkdir -p build/asan/fuzz
    say "fuzzing in the background (tests/fuzz/run_fuzzers.sh, log: $fuzz_log)"
    tests/fuzz/run_fuzzers.sh "${HEARTH_FUZZ_SECONDS:-30}" >"$fuzz_log" 2>&1 &
    fuzz_pid=$!
    # Interrupted (or failed), the fuzzers stop too: a background job ignores
    # SIGINT, so Ctrl-C alone left them running for minutes.
    trap 'kill -TERM "$fuzz_pid" 2>/dev/null || true' EXIT
    tsan_status=0
    run_tests tsan -L tsan || tsan_status=$?
    fuzz_status=0
    wait "$fuzz_pid" || fuzz_status=$?
    trap - EXIT  # waited for: its PID may be another process's by now
    say "fuzz targets (tests/fuzz/run_fuzzers.sh):"
    cat "$fuzz_log"
    [ "$tsan_status" -eq 0 ] || exit "$tsan_status"
    [ "$fuzz_status" -eq 0 ] || exit "$fuzz_status"
    skip_summary
    say "all test suites passed"
    ;;
  *)
    echo "usage: $0 serve|test" >&2
    echo "  serve  install missing Debian packages, build, and start hearth" >&2
    echo "  test   install missing Debian packages, build, and run the whole test suite" >&2
    exit 2
    ;;
esac
