# Sourced by the bench/server scripts: a scratch folder and one hearth-server
# at a time, stopped on exit whatever happens.
#
#   start_hearth BUILD_DIR ARGS...   starts BUILD_DIR/server/hearth-server ARGS on
#                                    loopback ports (gRPC, and HTTP when ARGS ask
#                                    for it; metrics off) and waits for its ready
#                                    line; sets server_pid, grpc_addr, http_addr
#   stop_hearth                      SIGTERM, then waits for it to exit
#   $work                            the scratch folder, removed on exit
work=$(mktemp -d)
server_pid=
grpc_addr=
http_addr=
hearth_cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"; wait "$server_pid" || true
  fi
  rm -rf "$work"
}
trap hearth_cleanup EXIT

start_hearth() {
  local build=$1; shift
  "$build/server/hearth-server" "$@" --listen 127.0.0.1:0 --metrics-listen off \
    >"$work/ready" 2>"$work/server.log" &
  server_pid=$!
  for _ in $(seq 1 600); do
    grep -q '^hearth-server ready' "$work/ready" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.1
  done
  grep -q '^hearth-server ready' "$work/ready" 2>/dev/null ||
    { cat "$work/server.log" >&2; echo "hearth-server was not ready after 60 s" >&2; exit 1; }
  grpc_addr=$(sed -n 's/^hearth-server ready grpc=\([^ ]*\).*/\1/p' "$work/ready")
  http_addr=$(sed -n 's/^hearth-server ready .* http=\([^ ]*\).*/\1/p' "$work/ready")
}

stop_hearth() { kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=; }
