#!/usr/bin/python3
"""hearth-server from an external client: Python grpcio with stubs generated
at test time from proto/hearth/v1/inference.proto (and the standard
grpc.health.v1 definition, which Debian ships in no package).

    python_client_test.py --server PATH/hearth-server --proto-dir PATH/proto
    python_client_test.py --address HOST:PORT --proto-dir PATH/proto

With --server it starts the server itself (built-in demo model, loopback,
free port), waits for its ready line and checks it exits 0 on SIGTERM; with
--address it talks to a server already running (which must serve "demo").
Exits 0 on success, 1 on a failed check, 77 (ctest's SKIP_RETURN_CODE) when
python3-grpcio is missing or nothing can generate the stubs (python3 -m
grpc_tools.protoc is tried first, then protoc with grpc_python_plugin).
"""
import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77

# grpc.health.v1, as published in grpc/grpc src/proto/grpc/health/v1/health.proto.
HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
"""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what, file=sys.stderr)


def stub_generators(out_dir, includes):
    """Command lines that generate Python messages and gRPC stubs, best first."""
    out = ["--python_out=" + out_dir, "--grpc_python_out=" + out_dir] + ["-I" + i for i in includes]
    cmds = []
    try:
        import grpc_tools.protoc  # noqa: F401
        cmds.append([sys.executable, "-m", "grpc_tools.protoc"] + out)
    except ImportError:
        pass
    # Debian 12's python3-grpc-tools (1.14) bundles protoc 3.5, which rejects
    # proto3 `optional` fields; protoc 3.21 with gRPC's Python plugin
    # (protobuf-compiler + protobuf-compiler-grpc) handles them.
    if os.path.exists("/usr/bin/protoc") and os.path.exists("/usr/bin/grpc_python_plugin"):
        cmds.append(["/usr/bin/protoc", "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"]
                    + out)
    return cmds


def generate_stubs(proto_dir, out_dir):
    # Under a module path of its own: "grpc/health/v1" would collide with the
    # installed grpc package. The proto package (the wire name) is unchanged.
    health_dir = os.path.join(out_dir, "protos", "hearth_test_health")
    os.makedirs(health_dir)
    with open(os.path.join(health_dir, "health.proto"), "w") as f:
        f.write(HEALTH_PROTO)
    files = ["hearth/v1/inference.proto", "hearth_test_health/health.proto"]
    errors = []
    for cmd in stub_generators(out_dir, [proto_dir, os.path.join(out_dir, "protos")]):
        r = subprocess.run(cmd + files, capture_output=True, text=True)
        if r.returncode == 0:
            print("stubs generated with: " + " ".join(cmd[:3]))
            sys.path.insert(0, out_dir)
            return
        errors.append("%s: %s" % (" ".join(cmd[:3]), r.stderr.strip()))
    raise RuntimeError("no protoc could generate the stubs:\n" + "\n".join(errors))


def start_server(binary, err_file, timeout_s):
    """Starts hearth-server; returns (process, grpc address) once it is ready."""
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--metrics-listen", "off"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err_file)
    deadline = time.monotonic() + timeout_s
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            proc.wait()
            raise RuntimeError("no ready line within %d s" % timeout_s)
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                proc.wait()
                raise RuntimeError("hearth-server exited (%d) before it was ready" % proc.returncode)
            buf += chunk
    line = buf.split(b"\n", 1)[0].decode()
    if not line.startswith("hearth-server ready "):
        proc.kill()
        proc.wait()
        raise RuntimeError("unexpected first line: " + line)
    fields = dict(w.split("=", 1) for w in line.split()[2:])
    return proc, fields["grpc"]


def run_checks(address):
    import grpc
    from hearth.v1 import inference_pb2 as pb
    from hearth.v1 import inference_pb2_grpc as pb_grpc
    from hearth_test_health import health_pb2, health_pb2_grpc

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=60)
    stub = pb_grpc.InferenceStub(channel)
    timeout = 120

    # Health: serving overall and for the demo model.
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "demo"):
        r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        check(r.status == health_pb2.HealthCheckResponse.SERVING,
              "health '%s' is %s" % (service, r.status))

    # ListModels: the demo model.
    models = stub.ListModels(pb.ListModelsRequest(), timeout=timeout).models
    check([m.name for m in models] == ["demo"], "models: %s" % [m.name for m in models])
    check(all(m.demo for m in models), "the demo flag is not set")

    # Generate (streaming): pieces, then exactly one Done, last.
    req = pb.GenerateRequest(model="demo", prompt="Hello from Python", max_tokens=24,
                             ignore_eos=True, echo_prompt_ids=True)
    req.sampling.temperature = 0.8
    req.sampling.seed = 42
    pieces, dones, order = [], [], []
    for msg in stub.Generate(req, timeout=timeout):
        kind = msg.WhichOneof("event")
        order.append(kind)
        if kind == "piece":
            pieces.append(msg.piece)
        elif kind == "done":
            dones.append(msg.done)
    check(len(dones) == 1 and order[-1] == "done", "one Done, last: %s" % order)
    ids = [p.token_id for p in pieces if p.token_id >= 0]
    text = "".join(p.text for p in pieces)
    check(len(ids) == 24, "24 tokens streamed, got %d" % len(ids))
    if dones:
        d = dones[0]
        check(d.finish_reason == pb.FINISH_REASON_LENGTH, "finish reason %s" % d.finish_reason)
        check(d.usage.generated_tokens == 24, "usage.generated_tokens %d" % d.usage.generated_tokens)
        check(len(d.usage.prompt_ids) == d.usage.prompt_tokens > 0, "echoed prompt ids")

    # Complete: the same request, the concatenation of the stream.
    c = stub.Complete(req, timeout=timeout)
    check(c.text == text, "Complete text %r != streamed %r" % (c.text, text))
    check(list(c.token_ids) == ids, "Complete ids differ from the stream's")
    if dones:
        check(c.done.finish_reason == dones[0].finish_reason, "Complete finish reason")
        check(c.done.usage.prompt_tokens == dones[0].usage.prompt_tokens, "Complete usage")

    # Log-probabilities: one per generated token, the chosen one first among
    # the alternatives only when it ranks there; every value <= 0.
    lreq = pb.GenerateRequest()
    lreq.CopyFrom(req)
    lreq.logprobs = True
    lreq.top_logprobs = 3
    lc = stub.Complete(lreq, timeout=timeout)
    check(len(lc.logprobs) == len(lc.token_ids) == 24, "one logprobs entry per token")
    for tid, lp in zip(lc.token_ids, lc.logprobs):
        check(lp.chosen.token_id == tid and lp.chosen.logprob <= 0, "chosen %s" % lp.chosen)
        check(len(lp.top) == 3, "3 alternatives, got %d" % len(lp.top))
        check(all(a.logprob >= b.logprob for a, b in zip(lp.top, lp.top[1:])), "top order")

    # Structured output: a JSON schema's value, checked with Python's json.
    sreq = pb.GenerateRequest(model="demo", prompt="A pet:", max_tokens=300)
    sreq.sampling.temperature = 1.0
    sreq.sampling.seed = 5
    sreq.response_format.json_schema = json.dumps({
        "type": "object",
        "properties": {"kind": {"enum": ["dog", "cat"]},
                       "age": {"type": "integer", "minimum": 0, "maximum": 30}},
        "required": ["kind", "age"], "additionalProperties": False})
    sc = stub.Complete(sreq, timeout=timeout)
    check(sc.done.finish_reason == pb.FINISH_REASON_EOS, "schema: finish %s" % sc.done.finish_reason)
    value = json.loads(sc.text)
    check(value["kind"] in ("dog", "cat") and 0 <= value["age"] <= 30, "schema: value %r" % value)
    try:
        bad = pb.GenerateRequest(model="demo", prompt="x", max_tokens=8)
        bad.response_format.grammar = "root ::= item"
        stub.Complete(bad, timeout=timeout)
        check(False, "a grammar with an undefined rule was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "grammar: %s" % e.code())
        check("response_format.grammar" in e.details(), "grammar: details %r" % e.details())

    # Chat: the demo model has no chat template.
    chat = pb.ChatRequest(model="demo", messages=[pb.ChatMessage(role="user", content="hi")])
    try:
        stub.ChatComplete(chat, timeout=timeout)
        check(False, "Chat on a model without a template was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, "Chat: %s" % e.code())
        check("'demo'" in e.details(), "Chat: details %r" % e.details())

    # Tokenize / Detokenize round trip.
    tok = stub.Tokenize(pb.TokenizeRequest(model="demo", text="round trip", add_bos=False),
                        timeout=timeout)
    check(len(tok.token_ids) == len(tok.pieces) > 0, "Tokenize ids and pieces")
    back = stub.Detokenize(pb.DetokenizeRequest(model="demo", token_ids=tok.token_ids),
                           timeout=timeout)
    check(back.text == "round trip", "Detokenize gave %r" % back.text)

    # Errors arrive as statuses naming the field.
    try:
        stub.Complete(pb.GenerateRequest(model="demo", prompt="x", max_tokens=0), timeout=timeout)
        check(False, "max_tokens 0 was accepted")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, "max_tokens 0: %s" % e.code())
        check("max_tokens" in e.details(), "max_tokens 0: details %r" % e.details())
    try:
        stub.GetModel(pb.GetModelRequest(model="nope"), timeout=timeout)
        check(False, "an unknown model was found")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, "unknown model: %s" % e.code())
    channel.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", help="hearth-server binary to start")
    p.add_argument("--address", help="HOST:PORT of a running server")
    p.add_argument("--proto-dir", required=True, help="folder holding hearth/v1/inference.proto")
    p.add_argument("--ready-timeout", type=float, default=180)
    args = p.parse_args()
    if bool(args.server) == bool(args.address):
        p.error("give exactly one of --server and --address")
    try:
        import grpc  # noqa: F401
    except ImportError as e:
        print("SKIPPED: needs python3-grpcio (%s)" % e, file=sys.stderr)
        return SKIP
    if not stub_generators("unused", []):
        print("SKIPPED: needs python3-grpc-tools, or protoc with grpc_python_plugin",
              file=sys.stderr)
        return SKIP

    tmp = tempfile.mkdtemp(prefix="hearth_py_client_")
    proc = None
    err_path = os.path.join(tmp, "server.stderr")
    try:
        generate_stubs(args.proto_dir, tmp)
        address = args.address
        if args.server:
            with open(err_path, "wb") as err_file:
                proc, address = start_server(args.server, err_file, args.ready_timeout)
        run_checks(address)
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                code = None
            check(code == 0, "hearth-server exit status after SIGTERM: %s" % code)
    except Exception as e:  # a crash of the test itself is a failure too
        failures.append(repr(e))
        print("FAILED: %r" % e, file=sys.stderr)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if failures and os.path.exists(err_path):
            with open(err_path, "rb") as f:
                sys.stderr.write("--- server stderr ---\n" + f.read().decode(errors="replace")[-6000:])
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        return 1
    print("python client: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
