#!/usr/bin/python3
"""Independent numpy reference forward pass for small GGUF decoder models.

Usage:
    /usr/bin/python3 reference_forward.py MODEL.gguf --prompt 1,2,3 --n 16

Prints one JSON object: {"prompt":[...],"greedy":[...],"logits":[...]}
"greedy" holds the N greedily chosen tokens (argmax, ties -> lowest id, no EOS
stop); "logits" are the full-vocabulary logits of the final step, i.e. the step
whose argmax produced the last greedy token (with N == 0: after the prompt).

Self-contained: its own GGUF v3 reader (all metadata value types, tensor
infos, F32/F16 data; other tensor types are refused by name) and a float64
numpy forward pass written from the published model definitions (Hugging Face
transformers modeling code), not from any GGUF runtime. KV cache kept in
float64.

Supported general.architecture values and what is implemented:
  llama    LlamaForCausalLM; optional q/k/v/o and MLP biases; llama3-style
           rope scaling through the rope_freqs tensor (inv_freq / factor);
           {arch}.attention.sliding_window, when present, makes every layer a
           sliding-window layer (Mistral semantics).
  qwen2    Qwen2: q/k/v biases.
  qwen3    Qwen3: per-head RMS norm of q and k before RoPE.
  phi3     Phi3: fused attn_qkv, fused ffn_up (= [gate; up]), LongRoPE
           short/long factor tensors and rope.scaling.attn_factor; optional
           sliding window on every layer.
  gemma2   Gemma2: sqrt(n_embd) embedding scale, pre+post norms, GELU-tanh,
           attention and final logit soft-capping, even layers sliding.
  gemma3   Gemma3 text: as Gemma2 plus per-head q/k norms, layers with
           (il+1) % 6 != 0 sliding (local rope base 10000), global layers
           use {arch}.rope.freq_base and linear rope scaling if present.
  granite  Granite: embedding_scale, attention.scale, residual_scale,
           logits divided by logit_scale.
  olmo2    OLMo2: post-norms only, q/k RMS norm over the whole projection.

Layout notes (how llama.cpp's converter writes these files):
  * GGUF dims are listed fastest-first, so a tensor with dims [in, out] is a
    numpy array of shape (out, in) -- the same layout as torch Linear weights.
  * For llama and granite the converter permutes q/k projection rows so that a
    runtime can rotate adjacent pairs; this script undoes that permutation and
    then applies the Hugging Face rotate_half RoPE. Other architectures are
    stored unpermuted (rotate_half directly).
  * Gemma norm weights are stored with the +1 already added, so every RMS norm
    here is x / sqrt(mean(x^2) + eps) * w.
"""

import argparse
import json
import math
import struct
import sys

import numpy as np

# --------------------------------------------------------------------------
# GGUF reader
# --------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"

# metadata value types
_VT_UINT8, _VT_INT8, _VT_UINT16, _VT_INT16, _VT_UINT32, _VT_INT32 = 0, 1, 2, 3, 4, 5
_VT_FLOAT32, _VT_BOOL, _VT_STRING, _VT_ARRAY = 6, 7, 8, 9
_VT_UINT64, _VT_INT64, _VT_FLOAT64 = 10, 11, 12

_SCALAR_FMT = {
    _VT_UINT8: "<B", _VT_INT8: "<b", _VT_UINT16: "<H", _VT_INT16: "<h",
    _VT_UINT32: "<I", _VT_INT32: "<i", _VT_FLOAT32: "<f", _VT_BOOL: "<?",
    _VT_UINT64: "<Q", _VT_INT64: "<q", _VT_FLOAT64: "<d",
}
_SCALAR_NP = {
    _VT_UINT8: "<u1", _VT_INT8: "<i1", _VT_UINT16: "<u2", _VT_INT16: "<i2",
    _VT_UINT32: "<u4", _VT_INT32: "<i4", _VT_FLOAT32: "<f4", _VT_BOOL: "<u1",
    _VT_UINT64: "<u8", _VT_INT64: "<i8", _VT_FLOAT64: "<f8",
}

# ggml tensor types (names only used for error messages)
_GGML_TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
    9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
    15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
    26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
    35: "TQ2_0",
}
_SUPPORTED_TENSOR_TYPES = {0: np.dtype("<f4"), 1: np.dtype("<f2")}


class GGUFError(Exception):
    pass


class _Cursor:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError("truncated GGUF file")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def string(self):
        n = self.scalar("<Q")
        return bytes(self.take(n)).decode("utf-8", errors="replace")


def _read_value(cur, vtype):
    if vtype == _VT_STRING:
        return cur.string()
    if vtype in _SCALAR_FMT:
        return cur.scalar(_SCALAR_FMT[vtype])
    if vtype == _VT_ARRAY:
        etype = cur.scalar("<I")
        count = cur.scalar("<Q")
        if etype in _SCALAR_NP:
            dt = np.dtype(_SCALAR_NP[etype])
            arr = np.frombuffer(cur.take(dt.itemsize * count), dtype=dt)
            if etype == _VT_BOOL:
                arr = arr.astype(bool)
            return arr.tolist()
        return [_read_value(cur, etype) for _ in range(count)]
    raise GGUFError("unknown metadata value type %d" % vtype)


class GGUFFile:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = memoryview(f.read())
        cur = _Cursor(self.buf)
        if bytes(cur.take(4)) != GGUF_MAGIC:
            raise GGUFError("not a GGUF file: %s" % path)
        self.version = cur.scalar("<I")
        if self.version not in (2, 3):
            raise GGUFError("unsupported GGUF version %d" % self.version)
        n_tensors = cur.scalar("<Q")
        n_kv = cur.scalar("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.scalar("<I")
            self.meta[key] = _read_value(cur, vtype)
        self.tensor_infos = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.scalar("<I")
            dims = [cur.scalar("<Q") for _ in range(n_dims)]
            ttype = cur.scalar("<I")
            offset = cur.scalar("<Q")
            self.tensor_infos[name] = (dims, ttype, offset)
        align = int(self.meta.get("general.alignment", 32))
        self.data_start = (cur.pos + align - 1) // align * align

    def has(self, name):
        return name in self.tensor_infos

    def tensor(self, name):
        """Tensor as float64 numpy array, shape = reversed GGUF dims."""
        if name not in self.tensor_infos:
            raise GGUFError("missing tensor %s" % name)
        dims, ttype, offset = self.tensor_infos[name]
        if ttype not in _SUPPORTED_TENSOR_TYPES:
            raise GGUFError("tensor %s has type %s; only F32 and F16 are supported"
                            % (name, _GGML_TYPE_NAMES.get(ttype, "type%d" % ttype)))
        dt = _SUPPORTED_TENSOR_TYPES[ttype]
        count = 1
        for d in dims:
            count *= d
        start = self.data_start + offset
        raw = np.frombuffer(self.buf[start:start + count * dt.itemsize], dtype=dt)
        if raw.size != count:
            raise GGUFError("tensor %s data truncated" % name)
        return raw.astype(np.float64).reshape(tuple(reversed(dims)))


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3",
                   "granite", "olmo2")
PERMUTED_QK_ARCHS = ("llama", "granite")   # converter permuted q/k rows


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def unpermute_rows(w, n_heads):
    """Undo llama.cpp convert's LlamaModel.permute (rows of q/k weight or bias)."""
    rows = w.shape[0]
    half = rows // n_heads // 2
    rest = w.shape[1:]
    return w.reshape((n_heads, half, 2) + rest).swapaxes(1, 2).reshape(w.shape)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Layer:
    pass


class Model:
    def __init__(self, g, total_len):
        self.g = g
        arch = g.meta.get("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise GGUFError("unsupported architecture %r" % arch)
        self.arch = arch
        m = g.meta
        a = arch + "."

        def key(name, default=None, required=False):
            if a + name in m:
                return m[a + name]
            if required:
                raise GGUFError("missing metadata key %s%s" % (a, name))
            return default

        self.n_embd = int(key("embedding_length", required=True))
        self.n_layer = int(key("block_count", required=True))
        n_head = key("attention.head_count", required=True)
        n_head_kv = key("attention.head_count_kv", n_head)

        def per_layer(v):
            if isinstance(v, list):
                if len(v) != self.n_layer:
                    raise GGUFError("per-layer array has wrong length")
                return [int(x) for x in v]
            return [int(v)] * self.n_layer

        self.n_head = per_layer(n_head)
        self.n_head_kv = per_layer(n_head_kv)
        self.head_dim_k = int(key("attention.key_length", self.n_embd // self.n_head[0]))
        self.head_dim_v = int(key("attention.value_length", self.head_dim_k))
        self.n_rot = int(key("rope.dimension_count", self.head_dim_k))
        self.eps = float(key("attention.layer_norm_rms_epsilon", 1e-5))
        self.freq_base = float(key("rope.freq_base", 10000.0))
        self.sliding_window = int(key("attention.sliding_window", 0) or 0)
        self.attn_softcap = key("attn_logit_softcapping")
        self.final_softcap = key("final_logit_softcapping")
        if arch == "gemma2":
            # Gemma2Config defaults (also what the converter always writes)
            if self.attn_softcap is None:
                self.attn_softcap = 50.0
            if self.final_softcap is None:
                self.final_softcap = 30.0
            if self.sliding_window == 0:
                self.sliding_window = 4096
        self.embedding_scale = key("embedding_scale")
        self.residual_scale = key("residual_scale")
        self.logit_scale = key("logit_scale")
        self.attention_scale = key("attention.scale")

        rope_type = key("rope.scaling.type")
        rope_factor = key("rope.scaling.factor")
        self.rope_linear = 1.0
        if rope_type in ("linear",) and rope_factor:
            self.rope_linear = float(rope_factor)
        elif rope_type not in (None, "none", "linear", "longrope", "su"):
            if not (rope_type == "yarn" and (rope_factor is None or float(rope_factor) == 1.0)):
                raise GGUFError("rope scaling type %r not supported" % rope_type)
        self.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))

        t = g.tensor
        self.tok_embd = t("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = t("output_norm.weight")
        self.output = t("output.weight") if g.has("output.weight") else self.tok_embd
        self.output_b = t("output.bias") if g.has("output.bias") else None

        # rope frequency factors (divisors of the inverse frequencies)
        self.rope_freq_factors = None
        if g.has("rope_freqs.weight"):
            self.rope_freq_factors = t("rope_freqs.weight")
        if arch == "phi3" and g.has("rope_factors_short.weight"):
            orig = int(key("rope.scaling.original_context_length",
                           key("context_length", 4096)))
            which = "long" if total_len > orig else "short"
            self.rope_freq_factors = t("rope_factors_%s.weight" % which)

        self.layers = []
        for il in range(self.n_layer):
            self.layers.append(self._load_layer(il))

    def _opt(self, name):
        return self.g.tensor(name) if self.g.has(name) else None

    def _load_layer(self, il):
        t = self.g.tensor
        p = "blk.%d." % il
        L = Layer()
        nh, nkv = self.n_head[il], self.n_head_kv[il]
        dk, dv = self.head_dim_k, self.head_dim_v
        if self.arch == "phi3" and self.g.has(p + "attn_qkv.weight"):
            qkv = t(p + "attn_qkv.weight")
            L.wq = qkv[:nh * dk]
            L.wk = qkv[nh * dk:nh * dk + nkv * dk]
            L.wv = qkv[nh * dk + nkv * dk:]
            L.bq = L.bk = L.bv = None
            if self.g.has(p + "attn_qkv.bias"):
                b = t(p + "attn_qkv.bias")
                L.bq, L.bk, L.bv = b[:nh * dk], b[nh * dk:nh * dk + nkv * dk], b[nh * dk + nkv * dk:]
        else:
            L.wq = t(p + "attn_q.weight")
            L.wk = t(p + "attn_k.weight")
            L.wv = t(p + "attn_v.weight")
            L.bq = self._opt(p + "attn_q.bias")
            L.bk = self._opt(p + "attn_k.bias")
            L.bv = self._opt(p + "attn_v.bias")
        if L.wv.shape[0] != nkv * dv or L.wq.shape[0] != nh * dk or L.wk.shape[0] != nkv * dk:
            raise GGUFError("layer %d: q/k/v shapes do not match head counts" % il)
        if self.arch in PERMUTED_QK_ARCHS:
            if self.n_rot != dk:
                raise GGUFError("partial rotary with permuted q/k not supported")
            L.wq = unpermute_rows(L.wq, nh)
            L.wk = unpermute_rows(L.wk, nkv)
            if L.bq is not None:
                L.bq = unpermute_rows(L.bq, nh)
            if L.bk is not None:
                L.bk = unpermute_rows(L.bk, nkv)
        L.wo = t(p + "attn_output.weight")
        L.bo = self._opt(p + "attn_output.bias")
        L.attn_norm = self._opt(p + "attn_norm.weight")
        L.attn_post_norm = self._opt(p + "post_attention_norm.weight")
        L.q_norm = self._opt(p + "attn_q_norm.weight")
        L.k_norm = self._opt(p + "attn_k_norm.weight")
        L.ffn_norm = self._opt(p + "ffn_norm.weight")
        L.ffn_post_norm = self._opt(p + "post_ffw_norm.weight")
        if self.arch == "phi3" and not self.g.has(p + "ffn_gate.weight"):
            up = t(p + "ffn_up.weight")
            half = up.shape[0] // 2
            L.ffn_gate, L.ffn_up = up[:half], up[half:]   # HF: gate, up = chunk(2)
        else:
            L.ffn_gate = t(p + "ffn_gate.weight")
            L.ffn_up = t(p + "ffn_up.weight")
        L.ffn_down = t(p + "ffn_down.weight")
        L.ffn_gate_b = self._opt(p + "ffn_gate.bias")
        L.ffn_up_b = self._opt(p + "ffn_up.bias")
        L.ffn_down_b = self._opt(p + "ffn_down.bias")

        # per-layer attention flavour
        L.window = 0
        L.rope_base = self.freq_base
        L.rope_linear = self.rope_linear
        if self.arch == "gemma2":
            L.window = self.sliding_window if il % 2 == 0 else 0
        elif self.arch == "gemma3":
            if (il + 1) % 6 != 0:
                L.window = self.sliding_window
                L.rope_base = 10000.0
                L.rope_linear = 1.0
        elif self.arch in ("llama", "phi3"):
            L.window = self.sliding_window
        L.inv_freq = self._inv_freq(L.rope_base, L.rope_linear)
        return L

    def _inv_freq(self, base, linear):
        i = np.arange(0, self.n_rot, 2, dtype=np.float64)
        inv = 1.0 / (base ** (i / self.n_rot))
        if self.rope_freq_factors is not None:
            inv = inv / self.rope_freq_factors[: self.n_rot // 2]
        return inv / linear

    def _rope(self, x, pos, inv_freq):
        # x: (heads, head_dim); HF rotate_half on the first n_rot dims
        freqs = pos * inv_freq
        emb = np.concatenate([freqs, freqs])
        cos = np.cos(emb) * self.rope_attn_factor
        sin = np.sin(emb) * self.rope_attn_factor
        r = self.n_rot
        xr = x[:, :r]
        out = xr * cos + rotate_half(xr) * sin
        return np.concatenate([out, x[:, r:]], axis=-1)

    def _q_scale(self):
        if self.attention_scale:
            return float(self.attention_scale)
        if self.arch == "gemma2" and self.n_layer == 46:
            # Gemma2-27B: query_pre_attn_scalar = hidden_size / num_heads
            return 1.0 / math.sqrt(self.n_embd / self.n_head[0])
        if self.arch == "gemma3" and self.n_layer == 62:
            # Gemma3-27B: query_pre_attn_scalar = hidden_size / num_heads
            return 1.0 / math.sqrt(self.n_embd / self.n_head[0])
        return 1.0 / math.sqrt(self.head_dim_k)

    def _attention(self, L, il, x, pos, cache):
        nh, nkv = self.n_head[il], self.n_head_kv[il]
        dk, dv = self.head_dim_k, self.head_dim_v
        q = L.wq @ x
        k = L.wk @ x
        v = L.wv @ x
        if L.bq is not None:
            q = q + L.bq
        if L.bk is not None:
            k = k + L.bk
        if L.bv is not None:
            v = v + L.bv
        if self.arch == "olmo2":
            q = rms_norm(q, L.q_norm, self.eps)
            k = rms_norm(k, L.k_norm, self.eps)
        q = q.reshape(nh, dk)
        k = k.reshape(nkv, dk)
        v = v.reshape(nkv, dv)
        if self.arch in ("qwen3", "gemma3"):
            q = rms_norm(q, L.q_norm, self.eps)
            k = rms_norm(k, L.k_norm, self.eps)
        q = self._rope(q, pos, L.inv_freq)
        k = self._rope(k, pos, L.inv_freq)
        cache["k"].append(k)
        cache["v"].append(v)
        K = np.stack(cache["k"], axis=1)      # (nkv, T, dk)
        V = np.stack(cache["v"], axis=1)      # (nkv, T, dv)
        T = K.shape[1]
        kv_pos = np.arange(T)
        allowed = kv_pos <= pos
        if L.window:
            allowed &= (pos - kv_pos) < L.window
        group = nh // nkv
        out = np.empty((nh, dv))
        scale = self._q_scale()
        for h in range(nh):
            kh = K[h // group]
            s = (kh @ q[h]) * scale
            if self.attn_softcap:
                s = np.tanh(s / self.attn_softcap) * self.attn_softcap
            s = np.where(allowed, s, -np.inf)
            s = s - s.max()
            p = np.exp(s)
            p = p / p.sum()
            out[h] = p @ V[h // group]
        o = L.wo @ out.reshape(-1)
        if L.bo is not None:
            o = o + L.bo
        return o

    def _mlp(self, L, x):
        g = L.ffn_gate @ x
        u = L.ffn_up @ x
        if L.ffn_gate_b is not None:
            g = g + L.ffn_gate_b
        if L.ffn_up_b is not None:
            u = u + L.ffn_up_b
        act = gelu_tanh(g) if self.arch in ("gemma2", "gemma3") else silu(g)
        d = L.ffn_down @ (act * u)
        if L.ffn_down_b is not None:
            d = d + L.ffn_down_b
        return d

    def step(self, token, pos, caches):
        """Runs one token at position pos; returns the logits (float64)."""
        x = self.tok_embd[token].copy()
        if self.arch in ("gemma2", "gemma3"):
            x = x * math.sqrt(self.n_embd)
        if self.arch == "granite" and self.embedding_scale:
            x = x * float(self.embedding_scale)
        eps = self.eps
        for il, L in enumerate(self.layers):
            cache = caches[il]
            if self.arch in ("gemma2", "gemma3"):
                h = x + rms_norm(self._attention(L, il, rms_norm(x, L.attn_norm, eps), pos, cache),
                                 L.attn_post_norm, eps)
                x = h + rms_norm(self._mlp(L, rms_norm(h, L.ffn_norm, eps)), L.ffn_post_norm, eps)
            elif self.arch == "olmo2":
                h = x + rms_norm(self._attention(L, il, x, pos, cache), L.attn_post_norm, eps)
                x = h + rms_norm(self._mlp(L, h), L.ffn_post_norm, eps)
            else:
                a = self._attention(L, il, rms_norm(x, L.attn_norm, eps), pos, cache)
                if self.arch == "granite" and self.residual_scale:
                    a = a * float(self.residual_scale)
                h = x + a
                f = self._mlp(L, rms_norm(h, L.ffn_norm, eps))
                if self.arch == "granite" and self.residual_scale:
                    f = f * float(self.residual_scale)
                x = h + f
        x = rms_norm(x, self.output_norm, eps)
        logits = self.output @ x
        if self.output_b is not None:
            logits = logits + self.output_b
        if self.arch == "granite" and self.logit_scale:
            logits = logits / float(self.logit_scale)
        if self.final_softcap:
            logits = np.tanh(logits / self.final_softcap) * self.final_softcap
        return logits


def run(path, prompt, n_gen):
    g = GGUFFile(path)
    model = Model(g, len(prompt) + n_gen)
    for tok in prompt:
        if not 0 <= tok < model.n_vocab:
            raise GGUFError("prompt token %d out of range (n_vocab %d)" % (tok, model.n_vocab))
    caches = [{"k": [], "v": []} for _ in range(model.n_layer)]
    pos = 0
    logits = None
    for tok in prompt:
        logits = model.step(tok, pos, caches)
        pos += 1
    greedy = []
    for i in range(n_gen):
        if i > 0:
            logits = model.step(greedy[-1], pos, caches)
            pos += 1
        greedy.append(int(np.argmax(logits)))   # first maximum = lowest id
    return greedy, logits


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompt", required=True, help="comma-separated token ids")
    ap.add_argument("--n", type=int, default=16, help="tokens to generate")
    args = ap.parse_args(argv)
    try:
        prompt = [int(s) for s in args.prompt.split(",")]
    except ValueError:
        ap.error("bad --prompt")
    if not prompt or args.n < 0:
        ap.error("need a non-empty prompt and --n >= 0")
    try:
        greedy, logits = run(args.model, prompt, args.n)
    except GGUFError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    out = sys.stdout
    out.write('{"prompt":[%s],"greedy":[%s],"logits":[%s]}\n' % (
        ",".join(str(t) for t in prompt),
        ",".join(str(t) for t in greedy),
        ",".join("%.9g" % float(v) for v in logits)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
