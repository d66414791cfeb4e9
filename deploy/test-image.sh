#!/usr/bin/env bash
# Builds the hearth container image (Dockerfile) and checks it end to end with podman,
# on a machine without a Docker engine or registry access:
#
#   1. a debian:bookworm base image made locally with debootstrap (if none exists)
#   2. podman build at nice 19 (the build stage compiles hearth and runs its tests)
#   3. the image's metadata: non-root user, ports, HEALTHCHECK, entrypoint
#   4. `podman run` with NO arguments (the demo model), ports published on loopback
#      (gRPC 50051, /metrics 9464, the OpenAI-compatible HTTP API 8080)
#   5. the HEALTHCHECK, run on demand (podman healthcheck run: periodic checks need
#      systemd timers, absent here), `hearth health`, and GET /health on the HTTP port
#   6. Generate through the image's CLI: hearth generate --server 127.0.0.1:PORT ...,
#      and POST /v1/completions with curl
#   7. /metrics read with curl: the Generate shows in the request counters
#   8. a model file mounted read-only at /models (if ../shared/models has one), with a
#      read-only root file system (as the Kubernetes manifests run it)
#   9. SIGTERM (podman kill --signal TERM): the drain, and exit code 0 from podman wait
#
# Every wait has a timeout; a trap removes the containers and the images this run
# created (base image, build stages, the tested image) unless --keep is given.
#
#   deploy/test-image.sh [--keep] [--no-tests] [--jobs N] [--image REF]
#     --keep       keep the images (and the build cache) for a faster next run
#     --no-tests   skip ctest in the build stage (RUN_TESTS=0)
#     --jobs N     compile jobs in the build stage (default 2)
#     --image REF  skip steps 1-2 and check an existing image (it is left in place)
# Environment: HEARTH_SHARED_DIR (models for step 8; default ../shared),
#   HEARTH_IMAGE_BUILD_TIMEOUT (seconds, default 5400).
#
# Needs podman, buildah, runc, debootstrap (Debian packages; installed with apt when
# missing and running as root) and network access to the Debian mirror.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
KEEP=0
RUN_TESTS=1
GIVEN_IMAGE=
JOBS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=1 ;;
    --no-tests) RUN_TESTS=0 ;;
    --jobs) JOBS=$2; shift ;;
    --image) GIVEN_IMAGE=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "test-image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

IMAGE=${GIVEN_IMAGE:-localhost/hearth:test-image-$$}
BASE=debian:bookworm
NAME=hearth-test-$$
MODELS_NAME=hearth-test-models-$$
BUILD_TIMEOUT=${HEARTH_IMAGE_BUILD_TIMEOUT:-5400}
SHARED=${HEARTH_SHARED_DIR:-$SRC/../shared}
WORK=$(mktemp -d /tmp/hearth-test-image.XXXXXX)
# The engine settings this kind of machine needs (see docs: the notes on podman).
RUNTIME_FLAGS=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096)

T0=$(date +%s)
SUMMARY=()
say() { printf '\033[1m[test-image]\033[0m %s\n' "$*"; }
step_done() {  # step_done "what" START_SECONDS
  local s=$(( $(date +%s) - $2 ))
  SUMMARY+=("$(printf '%-52s %5ss' "$1" "$s")")
  say "ok: $1 (${s}s)"
}
die() {
  say "FAILED: $*"
  exit 1
}

IMAGES_BEFORE=""
IMAGES_RECORDED=0
cleanup() {
  local rc=$?
  set +e
  for c in "$NAME" "$MODELS_NAME"; do
    if podman container exists "$c" 2>/dev/null; then
      if [ "$rc" -ne 0 ]; then
        say "logs of $c (last 30 lines):"
        timeout 20 podman logs --tail 30 "$c" 2>&1 | sed 's/^/    /'
      fi
      timeout 60 podman rm -f -t 2 "$c" >/dev/null 2>&1
    fi
  done
  if [ "$KEEP" = 1 ]; then
    say "--keep: kept $IMAGE, $BASE and the build cache"
  elif [ "$IMAGES_RECORDED" = 1 ]; then
    # Every image (tagged or not: base, build stages, layers) this run created.
    local created=()
    for id in $(podman images -a -q --no-trunc 2>/dev/null | sort -u); do
      grep -qx "$id" <<<"$IMAGES_BEFORE" || created+=("$id")
    done
    if [ ${#created[@]} -gt 0 ]; then
      timeout 300 podman rmi -f "${created[@]}" >/dev/null 2>&1
      say "removed the ${#created[@]} images this run created"
    fi
  fi
  rm -rf "$WORK"
  say "total $(( $(date +%s) - T0 ))s; exit $rc"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 0. tools ---------------------------------------------------------------------
PACKAGES=(podman buildah runc debootstrap netavark aardvark-dns iptables uidmap slirp4netns fuse-overlayfs curl)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages: ${missing[*]} (install them as root)"
  say "installing missing Debian packages: ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
say "podman $(podman version --format '{{.Client.Version}}'), source $SRC"
IMAGES_BEFORE=$(podman images -a -q --no-trunc | sort -u)
IMAGES_RECORDED=1

tests_line=""
if [ -n "$GIVEN_IMAGE" ]; then
  podman image exists "$IMAGE" || die "no image $IMAGE"
  say "--image: checking the existing image $IMAGE (no build)"
  SUMMARY+=("1.-2. base image and build: skipped (--image)")
else
  # ---- 1. base image ----------------------------------------------------------------
  t=$(date +%s)
  if podman image exists "$BASE"; then
    say "base image $BASE exists: reusing it"
    step_done "1. base image $BASE (existing)" "$t"
  else
    mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/\{0,1\}$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    mirror=${mirror:-http://deb.debian.org/debian}
    say "making $BASE with debootstrap --variant=minbase from $mirror (about 1-2 minutes)"
    timeout 900 nice -n 19 debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
      { tail -20 "$WORK/debootstrap.log"; die "debootstrap failed"; }
    # The sources of the official image: the release, its updates and security fixes.
    rm -f "$WORK/rootfs/etc/apt/sources.list"
    cat >"$WORK/rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -rf "$WORK"/rootfs/var/lib/apt/lists/* "$WORK"/rootfs/var/cache/apt/archives/*.deb
    tar -C "$WORK/rootfs" -c . | timeout 300 podman import - "$BASE" >/dev/null 2>"$WORK/import.log" ||
      { cat "$WORK/import.log"; die "podman import failed"; }
    rm -rf "$WORK/rootfs"
    step_done "1. base image $BASE (debootstrap + import)" "$t"
  fi

  # ---- 2. build ---------------------------------------------------------------------
  t=$(date +%s)
  say "building $IMAGE at nice 19 (--jobs $JOBS, tests $([ $RUN_TESTS = 1 ] && echo on || echo off)); log: $WORK/build.log"
  if ! timeout "$BUILD_TIMEOUT" nice -n 19 podman build --pull=never --format docker "${RUNTIME_FLAGS[@]}" \
      --layers="$([ $KEEP = 1 ] && echo true || echo false)" \
      --build-arg BUILD_BASE="$BASE" --build-arg RUNTIME_BASE="$BASE" \
      --build-arg JOBS="$JOBS" --build-arg RUN_TESTS="$RUN_TESTS" \
      -t "$IMAGE" -f "$SRC/Dockerfile" "$SRC" >"$WORK/build.log" 2>&1; then
    tail -40 "$WORK/build.log"
    grep -A40 "The following tests FAILED" "$WORK/build.log" | grep -E "^\s+[0-9]+ - " || true
    keep_log=${TMPDIR:-/tmp}/hearth-test-image-$$.build.log
    cp "$WORK/build.log" "$keep_log"
    die "podman build failed or timed out (${BUILD_TIMEOUT}s); full log: $keep_log"
  fi
  tests_line=$(grep -E "tests passed, [0-9]+ tests failed out of" "$WORK/build.log" | tail -1 || true)
  [ $RUN_TESTS = 0 ] || [ -n "$tests_line" ] || die "no ctest summary in the build log"
  step_done "2. podman build ($([ $RUN_TESTS = 1 ] && echo "compile + ctest" || echo "compile, no tests") in the build stage)" "$t"
  [ -z "$tests_line" ] || say "build-stage ctest: $tests_line"

fi

# ---- 3. metadata ------------------------------------------------------------------
t=$(date +%s)
inspect() { podman image inspect --format "$1" "$IMAGE"; }
size=$(inspect '{{.Size}}')
user=$(inspect '{{.Config.User}}')
ports=$(inspect '{{range $p, $v := .Config.ExposedPorts}}{{$p}} {{end}}')
health=$(inspect '{{if .Config.Healthcheck}}{{join .Config.Healthcheck.Test " "}}{{end}}')
entry=$(inspect '{{join .Config.Entrypoint " "}}')
say "image: $((size / 1000000)) MB, user '$user', exposes '$ports', entrypoint '$entry'"
say "healthcheck: $health"
[ "$user" = "10001:10001" ] || die "image user is '$user', expected 10001:10001"
grep -q "50051/tcp" <<<"$ports" && grep -q "9464/tcp" <<<"$ports" && grep -q "8080/tcp" <<<"$ports" ||
  die "image does not expose 50051, 9464 and 8080"
grep -q -- "--http-listen 0.0.0.0:8080" <<<"$entry" || die "the entrypoint does not turn the HTTP API on (--http-listen 0.0.0.0:8080)"
grep -q "hearth health" <<<"$health" || die "no HEALTHCHECK running 'hearth health'"
step_done "3. image metadata (user, ports, healthcheck)" "$t"

# ---- 4. run with no arguments -----------------------------------------------------
t=$(date +%s)
timeout 120 podman run -d --name "$NAME" "${RUNTIME_FLAGS[@]}" --pull=never --health-interval disable \
  -p 127.0.0.1::50051 -p 127.0.0.1::9464 -p 127.0.0.1::8080 "$IMAGE" >/dev/null 2>"$WORK/run.err" ||
  { cat "$WORK/run.err"; die "podman run failed"; }
GRPC=$(podman port "$NAME" 50051/tcp); GRPC=127.0.0.1:${GRPC##*:}
METRICS=$(podman port "$NAME" 9464/tcp); METRICS=127.0.0.1:${METRICS##*:}
HTTP=$(podman port "$NAME" 8080/tcp); HTTP=127.0.0.1:${HTTP##*:}
say "container $NAME: gRPC on $GRPC, metrics on $METRICS, HTTP API on $HTTP"
deadline=$(( $(date +%s) + 120 ))
until podman logs "$NAME" 2>/dev/null | grep -q "hearth-server ready"; do
  [ "$(podman inspect --format '{{.State.Running}}' "$NAME")" = true ] || die "the server exited before it was ready"
  [ "$(date +%s)" -lt "$deadline" ] || die "no ready line within 120 s"
  sleep 1
done
ready_line=$(podman logs "$NAME" 2>/dev/null | grep 'hearth-server ready')
say "$ready_line"
grep -q " http=" <<<"$ready_line" || die "the ready line has no http=HOST:PORT (HTTP API off?)"
[ "$(timeout 30 podman exec "$NAME" id -u)" = 10001 ] || die "the server does not run as uid 10001"
step_done "4. podman run IMAGE (no arguments) until ready" "$t"

# ---- 5. health --------------------------------------------------------------------
t=$(date +%s)
timeout 30 podman healthcheck run "$NAME" >/dev/null 2>&1 || die "podman healthcheck run: unhealthy"
say "HEALTHCHECK: healthy"
cli() { timeout 60 podman run --rm "${RUNTIME_FLAGS[@]}" --pull=never --no-healthcheck --network host --entrypoint hearth "$IMAGE" "$@"; }
# (podman 4.3 logs "unable to get systemd connection" errors for images with a
# HEALTHCHECK even with --health-interval disable: harmless, kept out of the output.)
cli health --server "$GRPC" || die "hearth health --server $GRPC failed"
# The HTTP API's /health (no token): what a plain HTTP probe would check.
health_code=$(curl -sS --max-time 10 -o "$WORK/health.json" -w '%{http_code}' "http://$HTTP/health") ||
  die "GET http://$HTTP/health failed"
say "GET /health: $health_code $(cat "$WORK/health.json")"
[ "$health_code" = 200 ] && grep -q '"status" *: *"ready"' "$WORK/health.json" ||
  die "GET /health answered $health_code $(cat "$WORK/health.json"), expected 200 {\"status\":\"ready\"}"
step_done "5. HEALTHCHECK + hearth health + GET /health" "$t"

# ---- 6. Generate through the CLI --------------------------------------------------
t=$(date +%s)
say "hearth generate --server $GRPC --prompt hi --max-tokens 8:"
cli generate --server "$GRPC" --prompt hi --max-tokens 8 >"$WORK/generate.out" 2>"$WORK/generate.err" ||
  { cat "$WORK/generate.err"; die "hearth generate failed"; }
printf '    text: %q\n' "$(cat "$WORK/generate.out")"
sed 's/^/    /' "$WORK/generate.err"
say "POST /v1/completions (model demo, 8 tokens):"
curl -fsS --max-time 60 -H 'Content-Type: application/json' \
  -d '{"model": "demo", "prompt": "hi", "max_tokens": 8}' \
  "http://$HTTP/v1/completions" >"$WORK/completion.json" || die "POST http://$HTTP/v1/completions failed"
sed 's/^/    /' "$WORK/completion.json"; echo
grep -q '"text_completion"' "$WORK/completion.json" || die "/v1/completions did not answer a text_completion object"
step_done "6. Generate through the CLI, /v1/completions with curl" "$t"

# ---- 7. metrics -------------------------------------------------------------------
t=$(date +%s)
curl -fsS --max-time 10 "http://$METRICS/metrics" >"$WORK/metrics.txt" || die "GET http://$METRICS/metrics failed"
say "/metrics: $(grep -vc '^#' "$WORK/metrics.txt") samples, e.g.:"
grep -E '^hearth_(requests_total|generated_tokens_total|model_queue_depth)\{' "$WORK/metrics.txt" | sed 's/^/    /'
grep -qE '^hearth_requests_total\{.*method="Generate".*\} [1-9]' "$WORK/metrics.txt" ||
  grep -qE '^hearth_requests_total\{[^}]*code="OK"[^}]*\} [1-9]' "$WORK/metrics.txt" ||
  die "hearth_requests_total does not count the Generate call"
grep -qE '^hearth_generated_tokens_total\{model="demo"\} [1-9]' "$WORK/metrics.txt" ||
  die "hearth_generated_tokens_total{model=\"demo\"} did not move"
step_done "7. /metrics with curl (counters moved)" "$t"

# ---- 8. a model file mounted at /models -------------------------------------------
t=$(date +%s)
model=$(ls "$SHARED"/models/*.gguf 2>/dev/null | head -1 || true)
if [ -n "$model" ]; then
  say "serving $(basename "$model") from a read-only /models mount, root file system read-only"
  timeout 120 podman run -d --name "$MODELS_NAME" "${RUNTIME_FLAGS[@]}" --pull=never --health-interval disable --read-only \
    -v "$(dirname "$model")":/models:ro -p 127.0.0.1::50051 "$IMAGE" \
    --model "tiny=/models/$(basename "$model")" --metrics-listen off >/dev/null 2>"$WORK/run.err" ||
    { cat "$WORK/run.err"; die "podman run with /models failed"; }
  port=$(podman port "$MODELS_NAME" 50051/tcp); port=127.0.0.1:${port##*:}
  deadline=$(( $(date +%s) + 120 ))
  until podman logs "$MODELS_NAME" 2>/dev/null | grep -q "hearth-server ready"; do
    [ "$(podman inspect --format '{{.State.Running}}' "$MODELS_NAME")" = true ] || die "the /models server exited"
    [ "$(date +%s)" -lt "$deadline" ] || die "the /models server was not ready within 120 s"
    sleep 1
  done
  out=$(cli generate --server "$port" --model tiny --prompt "Once upon a time" --max-tokens 8 2>/dev/null) ||
    die "generate with the /models model failed"
  printf '    text: %q\n' "$out"
  timeout 60 podman stop -t 30 "$MODELS_NAME" >/dev/null 2>&1
  step_done "8. --model from /models (ro), --read-only root" "$t"
else
  say "no GGUF file under $SHARED/models: step 8 skipped"
  SUMMARY+=("8. --model from /models: SKIPPED (no $SHARED/models)")
fi

# ---- 9. SIGTERM -------------------------------------------------------------------
t=$(date +%s)
timeout 30 podman kill --signal TERM "$NAME" >/dev/null 2>&1 || die "podman kill --signal TERM failed"
code=$(timeout 60 podman wait "$NAME" 2>/dev/null) || die "the server did not exit within 60 s of SIGTERM"
podman logs "$NAME" 2>&1 | grep -E "received SIGTERM|shutting down|stopped" | sed 's/^/    /'
[ "$code" = 0 ] || die "exit code after SIGTERM: $code (expected 0)"
step_done "9. SIGTERM -> clean drain, podman wait = 0" "$t"

say "summary ($IMAGE, $((size / 1000000)) MB):"
for line in "${SUMMARY[@]}"; do echo "    $line"; done
[ -z "$tests_line" ] || echo "    build-stage ctest: $tests_line"
echo "    end to end: $(( $(date +%s) - T0 ))s"
say "PASS"
