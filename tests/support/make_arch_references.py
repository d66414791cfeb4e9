#!/usr/bin/python3
"""Writes the per-architecture reference data under tests/engine/data/architectures/.

Usage:
    /usr/bin/python3 tests/support/make_arch_references.py \\
        --hearth-model build/release/tools/hearth-model \\
        [--llama-reference /tmp/llama_reference] --out tests/engine/data/architectures

For every case below, `hearth-model synth` writes a random-weight F32 file of
that architecture; then
  * tests/support/reference_forward.py (a float64 numpy forward written from
    the published model definitions) gives the greedy continuation of the
    case's prompt and the logits of the last step: CASE.numpy.json;
  * with --llama-reference (tests/support/llama_reference.cc compiled against
    a llama.cpp build; F32 KV cache), the same from llama.cpp:
    CASE.llama_cpp.json, for the architectures that llama.cpp version runs.
Each JSON holds the synth parameters, so the test rebuilds the exact file.
Run it with Debian's python3 (python3-numpy).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# dim, heads, kv heads, ffn, layers, vocab, context and seed of every case;
# cases override some. 16 prompt tokens + 56 generated = 72 positions: past
# every sliding window (6-7) and past Phi-3's original context (256 / 4 = 64),
# so its long rope factors are the ones used (by context, in llama.cpp and
# hearth; by sequence length, in the numpy reference: the same here).
BASE = dict(dim=128, heads=4, kv_heads=2, ffn=256, layers=3, vocab=512, context=256, seed=7,
            sliding_window=0)
CASES = [
    # name, arch, overrides, llama.cpp runs it (Feb 2025: no qwen3, gemma3;
    # it ignores llama's sliding window)
    ("llama", "llama", {}, True),
    ("llama_swa", "llama", dict(sliding_window=6), False),
    ("qwen2", "qwen2", {}, True),
    ("qwen3", "qwen3", {}, False),
    ("phi3", "phi3", dict(sliding_window=7), True),
    # llama.cpp runs Gemma 2 with 26, 42 or 46 layers only (its model sizes).
    ("gemma2", "gemma2", dict(layers=26, sliding_window=6), True),
    ("gemma3", "gemma3", dict(layers=7, sliding_window=6), False),
    ("granite", "granite", {}, True),
    # llama.cpp (Feb 2025) sizes OLMo 2's k norm as n_embd: no GQA here.
    ("olmo2", "olmo2", dict(kv_heads=4), True),
]
PROMPT = [1] + [259 + (37 * i) % 250 for i in range(15)]
N_GENERATE = 56


def synth(hearth_model, path, arch, p):
    cmd = [hearth_model, "synth", path, "--arch", arch, "--type", "f32",
           "--dim", str(p["dim"]), "--heads", str(p["heads"]), "--kv-heads", str(p["kv_heads"]),
           "--ffn", str(p["ffn"]), "--layers", str(p["layers"]), "--vocab", str(p["vocab"]),
           "--context", str(p["context"]), "--seed", str(p["seed"]),
           "--sliding-window", str(p["sliding_window"]), "--name", "reference"]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    return cmd


def run_json(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hearth-model", required=True)
    ap.add_argument("--llama-reference")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    prompt = ",".join(str(t) for t in PROMPT)
    with tempfile.TemporaryDirectory() as tmp:
        for name, arch, overrides, llama_cpp in CASES:
            p = dict(BASE, **overrides)
            path = os.path.join(tmp, name + ".gguf")
            synth(args.hearth_model, path, arch, p)
            runs = [("numpy", [sys.executable, os.path.join(HERE, "reference_forward.py"), path,
                               "--prompt", prompt, "--n", str(N_GENERATE)],
                     "tests/support/reference_forward.py (float64 numpy)")]
            if llama_cpp and args.llama_reference:
                runs.append(("llama_cpp", [args.llama_reference, path, prompt, str(N_GENERATE)],
                             "tests/support/llama_reference.cc against llama.cpp c392e509 "
                             "(Feb 2025), CPU, F32 KV cache"))
            for source, cmd, made_by in runs:
                r = run_json(cmd)
                doc = {"arch": arch, "synth": dict(p, arch=arch, type="f32"), "made_by": made_by,
                       "prompt": r["prompt"], "greedy": r["greedy"], "logits": r["logits"]}
                out = os.path.join(args.out, f"{name}.{source}.json")
                with open(out, "w") as f:
                    json.dump(doc, f, separators=(",", ":"))
                    f.write("\n")
                print(f"{out}: greedy {r['greedy'][:8]}...", file=sys.stderr)


if __name__ == "__main__":
    main()
