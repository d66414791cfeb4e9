#!/usr/bin/env bash
# Makes tests/kernels/data/{q4_k,q5_k,q6_k,q4_1,q5_0,q5_1,iq4_nl}_llama_cpp.txt:
# blocks of the K-quants and of the older types hearth converts, written
# by llama.cpp's quantizer and their values as llama.cpp's own Python decoder
# (gguf-py) reads them, so that hearth's decoders and kernels are checked
# against another implementation, not only against hearth's own encoders.
#
#   tests/kernels/data/make_k_reference.sh LLAMA_QUANTIZE GGUF_PY_DIR HEARTH_MODEL OUT_DIR
#
# LLAMA_QUANTIZE: a llama-quantize binary built from llama.cpp's source (never
# committed); GGUF_PY_DIR: that checkout's gguf-py directory; HEARTH_MODEL:
# build/release/tools/hearth-model. Needs Debian's python3-numpy and
# python3-sentencepiece (gguf-py imports it).
set -euo pipefail
quantize=$1 gguf_py=$2 hearth_model=$3 out_dir=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A small llama model with float weights (rows of 512 inputs: two super-blocks).
"$hearth_model" synth "$work/f32.gguf" --dim 512 --layers 1 --heads 8 --kv-heads 8 --ffn 1024 \
  --vocab 512 --context 64 --type f32 >/dev/null
for type in Q4_K_M Q5_K_M Q4_1 Q5_0 Q5_1 IQ4_NL; do
  "$quantize" "$work/f32.gguf" "$work/$type.gguf" "$type" >"$work/quantize.log" 2>&1 ||
    { cat "$work/quantize.log"; exit 1; }
done
PYTHONPATH="$gguf_py" /usr/bin/python3 - "$work" "$out_dir" "$(basename "$quantize")" <<'PY'
import sys
import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

work, out_dir, tool = sys.argv[1:4]
# Q4_K_M: attn_q is Q4_K; attn_v of layer 0 (of 1) gets Q6_K's extra bits.
# Q5_K_M: attn_q is Q5_K.
Q = GGMLQuantizationType
for file, name, qtype, out in [
        ("Q4_K_M", "blk.0.attn_q.weight", Q.Q4_K, "q4_k_llama_cpp.txt"),
        ("Q5_K_M", "blk.0.attn_q.weight", Q.Q5_K, "q5_k_llama_cpp.txt"),
        ("Q4_K_M", "blk.0.attn_v.weight", Q.Q6_K, "q6_k_llama_cpp.txt"),
        ("Q4_1", "blk.0.attn_q.weight", Q.Q4_1, "q4_1_llama_cpp.txt"),
        ("Q5_0", "blk.0.attn_q.weight", Q.Q5_0, "q5_0_llama_cpp.txt"),
        ("Q5_1", "blk.0.attn_q.weight", Q.Q5_1, "q5_1_llama_cpp.txt"),
        ("IQ4_NL", "blk.0.attn_q.weight", Q.IQ4_NL, "iq4_nl_llama_cpp.txt")]:
    reader = GGUFReader(work + "/" + file + ".gguf")
    t = next(t for t in reader.tensors if t.name == name)
    assert t.tensor_type == qtype, (name, t.tensor_type)
    rows, n_in = 6, int(t.shape[0])  # GGUF shapes are (n_in, n_out)
    raw = np.asarray(t.data).reshape(int(t.shape[1]), -1)[:rows]
    values = dequantize(raw, qtype).reshape(rows, n_in)
    with open(out_dir + "/" + out, "w") as f:
        f.write("# %s blocks of %s (first %d rows) of a synthetic model\n" % (qtype.name, name, rows))
        f.write("# quantized by llama.cpp's %s (%s), decoded by llama.cpp's gguf-py;\n" % (tool, file))
        f.write("# made by tests/kernels/data/make_k_reference.sh.\n")
        f.write("rows %d n_in %d\n" % (rows, n_in))
        for r in range(rows):
            f.write("blocks " + bytes(raw[r]).hex() + "\n")
            f.write("values " + " ".join("%.9g" % v for v in values[r]) + "\n")
    print("wrote " + out_dir + "/" + out)
PY
