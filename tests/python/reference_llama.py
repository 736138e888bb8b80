"""Independent float64 numpy reference of the Hugging Face decoder-only forward pass.

Covers LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM and
GptOssForCausalLM as implemented in `transformers` (modeling_llama.py / modeling_mistral.py /
modeling_qwen2.py / modeling_qwen3.py / modeling_qwen3_moe.py / modeling_gpt_oss.py):

  h = embed_tokens[ids]
  per layer:
    x = RMSNorm(h) * input_layernorm.weight
    q, k, v = x @ Wq^T (+bq), x @ Wk^T (+bk), x @ Wv^T (+bv)        (bias: qwen2 / attention_bias)
    q, k = per-head RMSNorm(q) * q_norm.weight, ... k_norm            (qwen3 only, BEFORE RoPE)
    q, k = q*cos + rotate_half(q)*sin, ...                            (half-rotation RoPE)
    attn = softmax(q k^T * head_dim**-0.5 + causal[/sliding] mask) v  (GQA: q head h uses kv head h // n_rep)
    h = h + attn @ Wo^T
    x = RMSNorm(h) * post_attention_layernorm.weight
    h = h + (silu(x @ Wg^T) * (x @ Wu^T)) @ Wd^T
  logits = RMSNorm(h) * norm.weight @ lm_head^T  (lm_head = embed_tokens when tie_word_embeddings)

gpt-oss differs: YaRN RoPE, a sink logit per head in each softmax (self_attn.sinks), layer_types'
sliding windows, biases on q/k/v/o, and every MLP a mixture of experts with a biased router (softmax
over the top-k logits) and experts stacked in x @ W form (mlp.experts.gate_up_proj [E, hidden, 2f],
gate and up columns interleaved, with biases) under the clamped SwiGLU.

Written from the HF modeling semantics; it does not share code or reading with astr's C++ implementation.
Everything is computed in float64.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np

# --------------------------------------------------------------------------------------------------
# Loading


def _load_safetensors_raw(path: str) -> dict[str, np.ndarray]:
    """Minimal safetensors reader for dtypes numpy lacks (BF16); returns float64 arrays."""
    out: dict[str, np.ndarray] = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=base)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.asarray(data[begin:end])
        dt = info["dtype"]
        if dt == "BF16":
            arr = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            arr = raw.view("<f2")
        elif dt == "F32":
            arr = raw.view("<f4")
        elif dt == "F64":
            arr = raw.view("<f8")
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        out[name] = arr.astype(np.float64).reshape(info["shape"])
    return out


def load_tensors(model_dir: str) -> dict[str, np.ndarray]:
    """Reads every *.safetensors in model_dir into float64 numpy arrays (HF tensor names)."""
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors in {model_dir}")
    tensors: dict[str, np.ndarray] = {}
    for fname in files:
        path = os.path.join(model_dir, fname)
        try:
            from safetensors.numpy import load_file

            loaded = {k: np.asarray(v, dtype=np.float64) for k, v in load_file(path).items()}
        except (TypeError, ValueError, KeyError):
            # safetensors' numpy API cannot represent bfloat16.
            loaded = _load_safetensors_raw(path)
        tensors.update(loaded)
    return tensors


# --------------------------------------------------------------------------------------------------
# RoPE (transformers.modeling_rope_utils semantics)


def rope_inv_freq(cfg: dict, head_dim: int) -> tuple[np.ndarray, float]:
    """Returns (inv_freq [head_dim/2], attention_scaling) as HF computes them."""
    base = float(cfg.get("rope_theta", 10000.0))
    partial = float(cfg.get("partial_rotary_factor", 1.0))
    dim = int(head_dim * partial)
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    scaling = cfg.get("rope_scaling")
    if not scaling:
        return inv_freq, 1.0
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"]), 1.0
    if rope_type == "llama3":
        factor = float(scaling["factor"])
        low_freq_factor = float(scaling["low_freq_factor"])
        high_freq_factor = float(scaling["high_freq_factor"])
        old_context_len = float(scaling["original_max_position_embeddings"])
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return np.where(is_medium, smoothed, inv_freq_llama), 1.0
    if rope_type == "yarn":
        # _compute_yarn_parameters: interpolation (/ factor) above the correction range, the
        # original frequencies below it, a linear ramp across; cos / sin times attention_factor.
        factor = float(scaling["factor"])
        orig = float(scaling["original_max_position_embeddings"])
        beta_fast = float(scaling.get("beta_fast") or 32)
        beta_slow = float(scaling.get("beta_slow") or 1)

        def corr_dim(rot: float) -> float:
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        inv = inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation
        att = scaling.get("attention_factor")
        if att is None:
            att = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
        return inv, float(att)
    raise NotImplementedError(f"rope_scaling type {rope_type!r} is not implemented in the reference")


def rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x: [heads, seq, head_dim]; cos/sin: [seq, rot_dim]. Partial rotary keeps the tail unrotated."""
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    out = xr * cos[None] + rotate_half(xr) * sin[None]
    return np.concatenate([out, xp], axis=-1) if xp.shape[-1] else out


# --------------------------------------------------------------------------------------------------
# Model


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Rounds to the nearest bfloat16 (ties to even), returned as float64."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + eps) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


@dataclass
class ReferenceModel:
    cfg: dict
    t: dict[str, np.ndarray]
    model_type: str = field(init=False)
    n_layers: int = field(init=False)
    n_heads: int = field(init=False)
    n_kv: int = field(init=False)
    head_dim: int = field(init=False)
    eps: float = field(init=False)
    # Emulate a bf16 backend: weight matrices rounded to bf16 on load, and the activation operand of every
    # matmul (incl. the lm_head) rounded to bf16; everything else stays float64. For estimating bf16 error.
    emulate_bf16: bool = False

    def __post_init__(self) -> None:
        c = self.cfg
        if self.emulate_bf16:
            self.t = {k: (round_bf16(v) if v.ndim == 2 else v) for k, v in self.t.items()}
        self._act = round_bf16 if self.emulate_bf16 else (lambda a: a)
        self.model_type = c.get("model_type", "llama")
        if self.model_type == "gpt_oss" and not c.get("rope_scaling"):
            c = self.cfg = dict(c, rope_scaling=c.get("rope_parameters") or {
                "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "truncate": False, "original_max_position_embeddings": 4096})
            c.setdefault("rope_theta", c["rope_scaling"].get("rope_theta", 150000.0))
        if self.model_type not in ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gpt_oss"):
            raise NotImplementedError(f"model_type {self.model_type!r}")
        act = c.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise NotImplementedError(f"hidden_act {act!r}")
        self.n_layers = int(c["num_hidden_layers"])
        self.n_heads = int(c["num_attention_heads"])
        self.n_kv = int(c.get("num_key_value_heads") or self.n_heads)
        hd = c.get("head_dim")
        self.head_dim = int(hd) if hd else int(c["hidden_size"]) // self.n_heads
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.inv_freq, self.attn_scaling = rope_inv_freq(c, self.head_dim)
        tie = c.get("tie_word_embeddings")
        if tie is None:
            tie = "lm_head.weight" not in self.t
        self.lm_head = self.t["model.embed_tokens.weight"] if tie else self.t["lm_head.weight"]

    @classmethod
    def load(cls, model_dir: str, emulate_bf16: bool = False) -> "ReferenceModel":
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        return cls(cfg, load_tensors(model_dir), emulate_bf16=emulate_bf16)

    def _sliding_window(self, layer: int) -> int | None:
        # Read from config.json only: a key that is absent means no window here (HF's MistralConfig would
        # default it to 4096, which no sequence in these tests reaches).
        c = self.cfg
        sw = c.get("sliding_window")
        if not sw:
            return None
        if self.model_type == "mistral":
            return int(sw)
        if self.model_type == "gpt_oss":
            types = c.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else
                                             "full_attention" for i in range(self.n_layers)]
            return int(sw) if types[layer] == "sliding_attention" else None
        if self.model_type in ("qwen2", "qwen3"):
            # HF Qwen2/Qwen3: sliding attention only with use_sliding_window, on layers >= max_window_layers.
            if c.get("use_sliding_window") and layer >= int(c.get("max_window_layers", 0)):
                return int(sw)
            return None
        return None

    def _mask(self, seq: int, window: int | None) -> np.ndarray:
        q = np.arange(seq)[:, None]
        k = np.arange(seq)[None, :]
        allowed = k <= q
        if window is not None:
            allowed &= k > q - window
        return np.where(allowed, 0.0, -np.inf)

    def forward(self, ids: list[int]) -> np.ndarray:
        """Returns logits [len(ids), vocab] in float64 (full causal forward, positions 0..n-1)."""
        t = self.t
        seq = len(ids)
        h = t["model.embed_tokens.weight"][np.asarray(ids, dtype=np.int64)]
        pos = np.arange(seq, dtype=np.float64)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb) * self.attn_scaling, np.sin(emb) * self.attn_scaling
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        n_rep = nh // nkv
        scale = hd**-0.5
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            x = self._act(rms_norm(h, t[p + "input_layernorm.weight"], self.eps))

            def proj(name: str) -> np.ndarray:
                y = x @ t[p + f"self_attn.{name}.weight"].T
                b = t.get(p + f"self_attn.{name}.bias")
                return y + b if b is not None else y

            q = proj("q_proj").reshape(seq, nh, hd)
            k = proj("k_proj").reshape(seq, nkv, hd)
            v = proj("v_proj").reshape(seq, nkv, hd)
            if self.model_type in ("qwen3", "qwen3_moe"):
                q = rms_norm(q, t[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, t[p + "self_attn.k_norm.weight"], self.eps)
            q = apply_rope(q.transpose(1, 0, 2), cos, sin)  # [nh, seq, hd]
            k = apply_rope(k.transpose(1, 0, 2), cos, sin)  # [nkv, seq, hd]
            v = v.transpose(1, 0, 2)
            k = np.repeat(k, n_rep, axis=0)  # repeat_kv: head h -> kv head h // n_rep
            v = np.repeat(v, n_rep, axis=0)
            scores = q @ k.transpose(0, 2, 1) * scale + self._mask(seq, self._sliding_window(i))[None]
            sinks = t.get(p + "self_attn.sinks")
            if sinks is not None:  # gpt-oss: one more logit per head, weighing no value
                scores = np.concatenate(
                    [scores, np.broadcast_to(sinks[:, None, None], (nh, seq, 1))], axis=-1)
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            if sinks is not None:
                probs = probs[..., :-1]
            attn = (probs @ v).transpose(1, 0, 2).reshape(seq, nh * hd)
            o = self._act(attn) @ t[p + "self_attn.o_proj.weight"].T
            ob = t.get(p + "self_attn.o_proj.bias")
            h = h + (o + ob if ob is not None else o)

            x = self._act(rms_norm(h, t[p + "post_attention_layernorm.weight"], self.eps))
            if p + "mlp.gate.weight" in t:  # Qwen3-MoE: a mixture of experts
                h = h + self._moe(p + "mlp.", x)
                continue
            if p + "mlp.router.weight" in t:  # gpt-oss
                h = h + self._gpt_oss_moe(p + "mlp.", x)
                continue
            g = x @ t[p + "mlp.gate_proj.weight"].T
            u = x @ t[p + "mlp.up_proj.weight"].T
            h = h + self._act(silu(g) * u) @ t[p + "mlp.down_proj.weight"].T
        h = self._act(rms_norm(h, t["model.norm.weight"], self.eps))
        return h @ self.lm_head.T

    def _moe(self, p: str, x: np.ndarray) -> np.ndarray:
        """Qwen3-MoE's sparse block, row by row: softmax over the router logits, the
        num_experts_per_tok most probable experts (renormalized with norm_topk_prob), each expert's
        SwiGLU MLP weighted by its probability."""
        t, c = self.t, self.cfg
        k = int(c["num_experts_per_tok"])
        logits = x @ t[p + "gate.weight"].T
        out = np.zeros_like(x)
        for r in range(x.shape[0]):
            probs = np.exp(logits[r] - logits[r].max())
            probs /= probs.sum()
            top = np.argsort(-probs, kind="stable")[:k]
            w = probs[top] / probs[top].sum() if c.get("norm_topk_prob") else probs[top]
            for e, we in zip(top, w):
                q = f"{p}experts.{e}."
                g = x[r] @ t[q + "gate_proj.weight"].T
                u = x[r] @ t[q + "up_proj.weight"].T
                out[r] += we * (self._act(silu(g) * u) @ t[q + "down_proj.weight"].T)
        return out

    def _gpt_oss_moe(self, p: str, x: np.ndarray) -> np.ndarray:
        """gpt-oss's experts, row by row: the top-k router logits (with its bias) softmaxed, each
        chosen expert's x @ gate_up + bias split into interleaved gate / up columns, the clamped
        SwiGLU ((clamp(up, +-L) + 1) * g * sigmoid(alpha g), g = min(gate, L)), then @ down +
        bias."""
        t, c = self.t, self.cfg
        k = int(c["num_experts_per_tok"])
        limit, alpha = float(c.get("swiglu_limit", 7.0)), float(c.get("swiglu_alpha", 1.702))
        logits = x @ t[p + "router.weight"].T + t[p + "router.bias"]
        gate_up, gate_up_b = t[p + "experts.gate_up_proj"], t[p + "experts.gate_up_proj_bias"]
        down, down_b = t[p + "experts.down_proj"], t[p + "experts.down_proj_bias"]
        out = np.zeros_like(x)
        for r in range(x.shape[0]):
            top = np.argsort(-logits[r], kind="stable")[:k]
            w = np.exp(logits[r][top] - logits[r][top].max())
            w /= w.sum()
            for e, we in zip(top, w):
                gu = x[r] @ gate_up[e] + gate_up_b[e]
                g = np.minimum(gu[0::2], limit)
                u = np.clip(gu[1::2], -limit, limit)
                act = (u + 1) * g / (1 + np.exp(-alpha * g))
                out[r] += we * (self._act(act) @ down[e] + down_b[e])
        return out

    def greedy(self, prompt: list[int], max_tokens: int) -> tuple[list[int], list[np.ndarray]]:
        """Greedy decode. Returns (generated ids, per-step log-softmax rows over the vocabulary)."""
        ids = list(prompt)
        out: list[int] = []
        rows: list[np.ndarray] = []
        for _ in range(max_tokens):
            row = log_softmax(self.forward(ids)[-1])
            tok = int(np.argmax(row))
            rows.append(row)
            out.append(tok)
            ids.append(tok)
        return out, rows

    def score(self, prompt: list[int], continuation: list[int]) -> list[np.ndarray]:
        """Log-softmax rows predicting each token of `continuation` (teacher forcing), one forward."""
        ids = list(prompt) + list(continuation)
        lp = log_softmax(self.forward(ids[:-1] if continuation else ids))
        return [lp[len(prompt) - 1 + j] for j in range(len(continuation))]
