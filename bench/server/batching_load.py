#!/usr/bin/python3
"""Helpers of bench/server/batching.sh (Python 3 standard library only).

  batching_load.py prompt N              the prompt `hearth bench --prompt-tokens N` sends
  batching_load.py free-port             a free TCP port on 127.0.0.1
  batching_load.py wait-http PORT PID S  wait until GET /health on 127.0.0.1:PORT answers 200
  batching_load.py load --port P ...     a load generator for llama.cpp's llama-server
  batching_load.py report RESULTS.jsonl  the tables of a batching.sh run

`load` is the llama-server twin of `hearth bench`: --requests streaming
/completion requests, at most --concurrency in flight, the same prompts (the
same words, the same deterministic choice of long-prompt requests from
--mix-seed), and one JSON line with the same statistics under the same names:
TTFT (request sent -> first token), inter-token gaps, per-stream decode tok/s
(tokens after the first / time from the first to the last token), aggregate
tok/s (tokens received / wall time), percentiles by nearest rank.

Tokens are counted from each event's "tokens_predicted" (llama-server's running
count), not from events: it holds a token back while its text ends in an
incomplete UTF-8 sequence and sends it with the next one. Such an event counts
its tokens as arriving together (the client sees them so); "coalesced_events"
says how often it happened.
"""

import argparse
import http.client
import json
import math
import os
import socket
import statistics
import sys
import threading
import time

# --------------------------------------------------------------------------
# The same prompt and fault mix as tools/client/bench.h.

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "then",
         "runs", "into", "the", "old", "house"]
M64 = (1 << 64) - 1


def prompt_of_tokens(n):
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def uniform01(seed, index, stream):
    h = mix64(mix64(mix64(seed) ^ index) ^ ((stream * 0xD1B54A32D192ED03) & M64))
    return (h >> 11) * (1.0 / 9007199254740992.0)


REQUEST_WORDS = ["why", "did", "small", "green", "birds", "sing", "near", "her", "garden",
                 "while", "people", "walk", "slowly", "past", "tall", "trees", "today", "again"]


def request_words(mix_seed, index, n):
    """tools/client/bench.h's request_words: a request's own words."""
    return " ".join(REQUEST_WORDS[int(uniform01(mix_seed, index, 16 + k) * len(REQUEST_WORDS))]
                    for k in range(n))


def is_long_prompt(mix_seed, index, fraction):
    return uniform01(mix_seed, index, 3) < fraction


# --------------------------------------------------------------------------
# Statistics, as tools/client/percentiles.h and bench.h compute them.

def nearest_rank(sorted_samples, p):
    if not sorted_samples:
        return 0.0
    if p <= 0:
        return sorted_samples[0]
    if p >= 100:
        return sorted_samples[-1]
    n = len(sorted_samples)
    rank = max(1, min(n, math.ceil(p / 100.0 * n - 1e-9)))
    return sorted_samples[rank - 1]


def percentiles(samples):
    s = sorted(samples)
    return {"p50": nearest_rank(s, 50), "p95": nearest_rank(s, 95), "p99": nearest_rank(s, 99),
            "samples": len(s)}


def summarize(outcomes, wall_s, concurrency):
    ok = [o for o in outcomes if o["ok"]]
    errors = {}
    examples = {}
    for o in outcomes:
        if not o["ok"]:
            errors[o["error_kind"]] = errors.get(o["error_kind"], 0) + 1
            examples.setdefault(o["error_kind"], o["error"])
    ttft, itl, decode = [], [], []
    tokens = 0
    for o in outcomes:
        t = o["token_times_s"]
        tokens += len(t)
        if t:
            ttft.append(t[0])
        itl.extend(t[i] - t[i - 1] for i in range(1, len(t)))
        if o["ok"] and len(t) >= 2 and t[-1] > t[0]:
            decode.append((len(t) - 1) / (t[-1] - t[0]))
    # Split by long prompts (LongPromptSplit in bench.h).
    prefill = sorted((o["start_s"], o["start_s"] + (o["token_times_s"][0] if o["token_times_s"]
                                                     else o["total_s"]))
                     for o in outcomes if o["long_prompt"])
    merged = []
    for a, b in prefill:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])

    def overlaps(a, b):
        return any(lo < b and hi > a for lo, hi in merged)

    ttft_long = [o["token_times_s"][0] for o in outcomes if o["long_prompt"] and o["token_times_s"]]
    ttft_other, itl_other, itl_during = [], [], []
    for o in outcomes:
        if o["long_prompt"]:
            continue
        t, s0 = o["token_times_s"], o["start_s"]
        if t:
            ttft_other.append(t[0])
        for i in range(1, len(t)):
            itl_other.append(t[i] - t[i - 1])
            if merged and overlaps(s0 + t[i - 1], s0 + t[i]):
                itl_during.append(t[i] - t[i - 1])
    n_long = sum(1 for o in outcomes if o["long_prompt"])
    empty = percentiles([])
    out = {
        "requests": len(outcomes), "concurrency": concurrency, "ok": len(ok),
        "failed": len(outcomes) - len(ok), "errors": errors, "error_examples": examples,
        "expected_errors": {}, "wall_s": wall_s,
        "requests_per_s": len(ok) / wall_s if wall_s > 0 else 0.0,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else 0.0,
        "generated_tokens": tokens,
        "stream_decode_tokens_per_s": statistics.fmean(decode) if decode else 0.0,
        "ttft_s": percentiles(ttft), "itl_s": percentiles(itl),
        "long_prompt_requests": n_long,
        "ttft_long_prompt_s": percentiles(ttft_long) if n_long else empty,
        "ttft_other_s": percentiles(ttft_other) if n_long else empty,
        "itl_other_s": percentiles(itl_other) if n_long else empty,
        "itl_other_max_s": max(itl_other) if n_long and itl_other else 0.0,
        "itl_during_long_prefill_s": percentiles(itl_during) if n_long else empty,
        "coalesced_events": sum(o["coalesced_events"] for o in outcomes),
        # The prompt lengths llama-server saw, and how many tokens of them it
        # prefilled (the same unless it reused a cached prefix).
        "prompt_tokens": sorted({o["prompt_tokens"] for o in outcomes if o["prompt_tokens"]}),
        "prompt_processed_tokens": sorted({o["prompt_processed"] for o in outcomes
                                           if o["prompt_processed"]}),
        # Summed (hearth bench's prompt_tokens / cached_tokens): prompt tokens
        # sent and those llama-server computed (its timings' prompt_n).
        "prompt_tokens_sum": sum(o["prompt_tokens"] for o in outcomes),
        "prompt_processed_sum": sum(o["prompt_processed"] for o in outcomes),
    }
    return out


# --------------------------------------------------------------------------
# The llama-server load generator.

def run_one(port, body, timeout_s, long_prompt, t_run):
    out = {"ok": False, "error_kind": "", "error": "", "token_times_s": [], "total_s": 0.0,
           "start_s": time.monotonic() - t_run, "long_prompt": long_prompt,
           "coalesced_events": 0, "prompt_tokens": 0, "prompt_processed": 0}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", "/completion", body=body,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error_kind"] = "HTTP_%d" % resp.status
            out["error"] = resp.read(2000).decode("utf-8", "replace")
            return out
        decoded = 0
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            now = time.monotonic() - t0
            event = json.loads(data)
            if "error" in event:
                out["error_kind"] = "SERVER_ERROR"
                out["error"] = json.dumps(event["error"])[:2000]
                return out
            n = event.get("tokens_predicted")
            if n is None:
                n = decoded + len(event.get("tokens", []))
            if event.get("tokens_evaluated"):
                out["prompt_tokens"] = event["tokens_evaluated"]
            if n > decoded:
                if n - decoded > 1:
                    out["coalesced_events"] += 1
                out["token_times_s"].extend([now] * (n - decoded))
                decoded = n
            if event.get("stop"):
                out["ok"] = True
                out["prompt_processed"] = (event.get("timings") or {}).get("prompt_n", 0)
                break
        if not out["ok"]:
            out["error_kind"] = "INCOMPLETE"
            out["error"] = "the stream ended without a final event"
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error_kind"] = type(e).__name__
        out["error"] = str(e)[:2000]
    finally:
        out["total_s"] = time.monotonic() - t0
        conn.close()
    return out


def cmd_load(a):
    prompt = prompt_of_tokens(a.prompt_tokens) if a.prompt_tokens else a.prompt
    long_prompt = prompt_of_tokens(a.long_prompt_tokens)
    shared_prefix = prompt_of_tokens(a.shared_prefix_tokens)
    own_words = a.prompt_tokens or 20

    def prompt_of(i, is_long):
        if is_long:
            return long_prompt
        if a.shared_prefix_tokens:  # as `hearth bench --shared-prefix-tokens`
            return shared_prefix + " " + request_words(a.mix_seed, i, own_words)
        return prompt

    def body(i, is_long):
        return json.dumps({
            "prompt": prompt_of(i, is_long), "n_predict": a.max_tokens,
            "ignore_eos": True, "stream": True, "temperature": a.temperature, "seed": a.seed,
            # Without --cache-prompt every request prefills its whole prompt
            # (hearth bench --no-prefix-reuse); with it a slot reuses what
            # its cache holds (hearth's prefix reuse).
            "cache_prompt": a.cache_prompt,
        }).encode()

    for w in range(a.warmup):  # one at a time, not measured, as hearth bench's
        r = run_one(a.port, body(a.requests + w, False), a.timeout_s, False, time.monotonic())
        if not r["ok"]:
            print("batching_load: warmup failed: %s %s" % (r["error_kind"], r["error"]),
                  file=sys.stderr)
            return 1

    outcomes = [None] * a.requests
    lock = threading.Lock()
    next_index = [0]
    t_run = time.monotonic()
    run_deadline = t_run + a.deadline_s

    def worker():
        while True:
            with lock:
                i = next_index[0]
                if i >= a.requests or time.monotonic() > run_deadline:
                    return
                next_index[0] += 1
            is_long = is_long_prompt(a.mix_seed, i, a.long_prompt_fraction)
            outcomes[i] = run_one(a.port, body(i, is_long), a.timeout_s, is_long, t_run)

    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(min(a.concurrency, a.requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, run_deadline - time.monotonic()) + a.timeout_s + 5)
    wall_s = time.monotonic() - t_run
    done = [o for o in outcomes if o is not None]
    if len(done) < a.requests:
        print("batching_load: run deadline reached: %d of %d requests ran" % (len(done), a.requests),
              file=sys.stderr)
    s = summarize(done, wall_s, a.concurrency)
    s["requests"] = a.requests
    s["failed"] = a.requests - s["ok"]
    print(json.dumps(s))
    return 1 if s["failed"] else 0


# --------------------------------------------------------------------------
# Process helpers.

def cmd_free_port(_a):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
    return 0


def cmd_wait_http(a):
    deadline = time.monotonic() + a.timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(a.pid, 0)
            with open("/proc/%d/stat" % a.pid) as f:  # a zombie (exited, not yet reaped)
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    raise OSError("exited")
        except OSError:
            print("batching_load: process %d exited before it was ready" % a.pid, file=sys.stderr)
            return 1
        try:
            conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=2)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status == 200:
                return 0
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    print("batching_load: 127.0.0.1:%d not ready after %g s" % (a.port, a.timeout_s),
          file=sys.stderr)
    return 1


# --------------------------------------------------------------------------
# The report.

def ms(x):
    return "%.1f" % (x * 1e3)


def ratio(a, b):
    return "%.2f" % (a / b) if b else "n/a"


def table(rows):
    width = [max(len(str(r[c])) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).rjust(width[c]) if c else str(v).ljust(width[c])
                        for c, v in enumerate(r)).rstrip())


def cmd_report(a):
    meta, runs = {}, []
    with open(a.results) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if "meta" in d:
                meta = d["meta"]
            else:
                runs.append(d)
    print()
    print("=== batching: %s" % meta.get("title", ""))
    for k in ("model", "prompt", "load", "hearth", "llama-server"):
        if k in meta:
            print("    %-13s %s" % (k + ":", meta[k]))
    servers = [s for s in ("hearth", "llama-server") if any(r["server"] == s for r in runs)]

    def find(server, mode, streams):
        for r in runs:
            if r["server"] == server and r["mode"] == mode and r["streams"] == streams:
                return r
        return None

    for server in servers:
        plain = sorted((r for r in runs if r["server"] == server and r["mode"] == "plain"),
                       key=lambda r: r["streams"])
        if not plain:
            continue
        single = find(server, "plain", 1)
        print()
        print("--- %s: one row per number of concurrent streams" % server)
        rows = [["streams", "req", "fail", "agg tok/s", "x 1-stream", "stream tok/s",
                 "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "p99 ITL / 1-stream p50",
                 "steady ITL p99 ms", "steady p99 / 1-stream p50"]]
        for r in plain:
            steady = r.get("itl_steady_s")  # gaps while no prompt was prefilled (hearth bench)
            rows.append([r["streams"], r["requests"], r["failed"], "%.1f" % r["tokens_per_s"],
                         ratio(r["tokens_per_s"], single["tokens_per_s"]) if single else "n/a",
                         "%.1f" % r["stream_decode_tokens_per_s"],
                         ms(r["ttft_s"]["p50"]), ms(r["ttft_s"]["p99"]),
                         ms(r["itl_s"]["p50"]), ms(r["itl_s"]["p99"]),
                         ratio(r["itl_s"]["p99"], single["itl_s"]["p50"]) if single else "n/a",
                         ms(steady["p99"]) if steady and steady.get("samples") else "n/a",
                         ratio(steady["p99"], single["itl_s"]["p50"])
                         if single and steady and steady.get("samples") else "n/a"])
        table(rows)
        prefill = meta.get("prefill_reference")
        if server == "hearth" and prefill:
            reference = prefill["tok_s"]
            print("  bench_engine prefill, same shape and type, %d threads, right after these levels:"
                  " %.1f tok/s; aggregate as a share of it:" % (prefill["threads"], reference))
            print("  " + ", ".join("%d streams %.0f%%" % (r["streams"], 100 * r["tokens_per_s"] / reference)
                                   for r in plain))
        for r in plain:
            if r.get("prompt_processed_tokens") and \
                    r["prompt_processed_tokens"] != r.get("prompt_tokens"):
                print("  (%d streams: prompts of %s tokens, prefilled %s: a cached prefix was reused)"
                      % (r["streams"], r.get("prompt_tokens"), r["prompt_processed_tokens"]))
            if r.get("coalesced_events"):
                print("  (%d streams: %d events carried more than one token)"
                      % (r["streams"], r["coalesced_events"]))
            for code, n in r.get("errors", {}).items():
                print("  (%d streams: error %s x%d: %s)" % (
                    r["streams"], code, n, r.get("error_examples", {}).get(code, "")[:200]))

    # A `hearth bench` older than the long-prompt split prints none of its fields.
    for r in runs:
        for k in ("ttft_long_prompt_s", "ttft_other_s", "itl_other_s", "itl_during_long_prefill_s"):
            r.setdefault(k, percentiles([]))
        r.setdefault("long_prompt_requests", 0)
        r.setdefault("itl_other_max_s", 0.0)
    long_runs = [r for r in runs if r["mode"] == "long"]
    if long_runs:
        print()
        print("--- long prompts: a fraction of the requests has a ~%s-token prompt"
              % meta.get("long_prompt_tokens", "?"))
        rows = [["server", "streams", "long req", "agg tok/s", "TTFT long p50/p99 ms",
                 "TTFT others p50/p99 ms", "ITL others p50/p99/max ms",
                 "ITL during long prefill p50/p99 ms (n)", "p99 ITL others / 1-stream p50",
                 "p99 ITL others / same-streams p50"]]
        for r in long_runs:
            single = find(r["server"], "plain", 1)
            same = find(r["server"], "plain", r["streams"])
            d = r["itl_during_long_prefill_s"]
            rows.append([r["server"], r["streams"], r["long_prompt_requests"],
                         "%.1f" % r["tokens_per_s"],
                         "%s / %s" % (ms(r["ttft_long_prompt_s"]["p50"]),
                                      ms(r["ttft_long_prompt_s"]["p99"])),
                         "%s / %s" % (ms(r["ttft_other_s"]["p50"]), ms(r["ttft_other_s"]["p99"])),
                         "%s / %s / %s" % (ms(r["itl_other_s"]["p50"]), ms(r["itl_other_s"]["p99"]),
                                           ms(r["itl_other_max_s"])),
                         "%s / %s (%d)" % (ms(d["p50"]), ms(d["p99"]), d["samples"]),
                         ratio(r["itl_other_s"]["p99"], single["itl_s"]["p50"]) if single else "n/a",
                         ratio(r["itl_other_s"]["p99"], same["itl_s"]["p50"]) if same else "n/a"])
        table(rows)
        for r in long_runs:
            for code, n in r.get("errors", {}).items():
                print("  (%s: error %s x%d: %s)" % (
                    r["server"], code, n, r.get("error_examples", {}).get(code, "")[:200]))

    if len(servers) == 2:
        print()
        print("--- hearth / llama-server (tok/s: above 1 = hearth faster; latencies: below 1 = hearth lower;")
        print("    long rows: TTFT of the long-prompt requests, ITL of the other streams)")
        rows = [["streams", "mode", "agg tok/s", "stream tok/s", "TTFT p50", "TTFT p99", "ITL p50",
                 "ITL p99"]]
        keys = sorted({(r["mode"], r["streams"]) for r in runs}, key=lambda k: (k[0] != "plain", k[1]))
        for mode, streams in keys:
            h, l = find("hearth", mode, streams), find("llama-server", mode, streams)
            if not h or not l:
                continue
            ttft, itl = ("ttft_s", "itl_s") if mode == "plain" else ("ttft_long_prompt_s", "itl_other_s")
            rows.append([streams, mode, ratio(h["tokens_per_s"], l["tokens_per_s"]),
                         ratio(h["stream_decode_tokens_per_s"], l["stream_decode_tokens_per_s"]),
                         ratio(h[ttft]["p50"], l[ttft]["p50"]), ratio(h[ttft]["p99"], l[ttft]["p99"]),
                         ratio(h[itl]["p50"], l[itl]["p50"]), ratio(h[itl]["p99"], l[itl]["p99"])])
        table(rows)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("prompt")
    q.add_argument("n", type=int)
    sub.add_parser("free-port")
    q = sub.add_parser("wait-http")
    q.add_argument("port", type=int)
    q.add_argument("pid", type=int)
    q.add_argument("timeout_s", type=float)
    q = sub.add_parser("load")
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--concurrency", type=int, default=1)
    q.add_argument("--requests", type=int, default=10)
    q.add_argument("--prompt", default="Once upon a time")
    q.add_argument("--prompt-tokens", type=int, default=0)
    q.add_argument("--max-tokens", type=int, default=64)
    q.add_argument("--temperature", type=float, default=0.0)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--long-prompt-fraction", type=float, default=0.0)
    q.add_argument("--long-prompt-tokens", type=int, default=512)
    q.add_argument("--mix-seed", type=int, default=1)
    q.add_argument("--shared-prefix-tokens", type=int, default=0,
                   help="words of a prefix every prompt shares (hearth bench's flag)")
    q.add_argument("--cache-prompt", action="store_true",
                   help="let llama-server reuse a slot's KV cache (cache_prompt)")
    q.add_argument("--warmup", type=int, default=0)
    q.add_argument("--timeout-s", type=float, default=600, help="per request")
    q.add_argument("--deadline-s", type=float, default=3600,
                   help="no request starts after this long")
    q = sub.add_parser("report")
    q.add_argument("results")
    a = p.parse_args()
    if a.cmd == "prompt":
        sys.stdout.write(prompt_of_tokens(a.n))
        return 0
    if a.cmd == "load":
        if a.concurrency < 1 or a.requests < 1:
            p.error("--concurrency and --requests must be at least 1")
        return cmd_load(a)
    return {"free-port": cmd_free_port, "wait-http": cmd_wait_http, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
