"""Minimal LLaMA-style decoder (PyTorch) + safetensors reader/writer.

Conventions (must be matched by the C++ decoder):
  * RMSNorm, pre-norm:  y = x / sqrt(mean(x^2) + eps) * weight
  * attention: q = x Wq^T, k = x Wk^T, v = x Wv^T (no biases), heads are
    contiguous slices of head_dim rows of the projection weight (HF layout);
    grouped-query attention: query head h uses KV head h // (n_heads / n_kv_heads).
  * RoPE, Hugging Face "rotate_half" (non-interleaved) convention:
      inv_freq[i] = rope_theta ** (-2 i / head_dim),  i = 0 .. head_dim/2 - 1
      angle[p, i] = p * inv_freq[i]    (p = absolute position, starting at 0)
      cos/sin vectors of length head_dim = concat(cos(angle), cos(angle))
      rotate_half(x) = concat(-x[half:], x[:half])
      x_rot = x * cos + rotate_half(x) * sin    (applied to q and k per head)
  * scores = q k^T / sqrt(head_dim), causal softmax, out = o_proj(concat heads)
  * MLP: down( silu(gate(x)) * up(x) )
  * residual: h = h + attn(norm1(h)); h = h + mlp(norm2(h)); logits = lm_head(norm(h))
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------
# safetensors (format: u64-LE header length, JSON header, raw LE data)
# ---------------------------------------------------------------------------
_DT = {torch.float32: ("F32", 4), torch.float64: ("F64", 8), torch.float16: ("F16", 2),
       torch.int64: ("I64", 8), torch.int32: ("I32", 4)}
_DT_INV = {v[0]: k for k, v in _DT.items()}


def save_safetensors(tensors, path, metadata=None):
    """tensors: dict name -> torch.Tensor. Writes atomically (tmp + rename)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        code, _ = _DT[t.dtype]
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        dt = _DT_INV[info["dtype"]]
        b, e = info["data_offsets"]
        npdt = {torch.float32: "<f4", torch.float64: "<f8", torch.float16: "<f2",
                torch.int64: "<i8", torch.int32: "<i4"}[dt]
        arr = np.frombuffer(data[base + b:base + e], dtype=npdt).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class Config:
    def __init__(self, vocab_size=256, hidden_size=192, intermediate_size=512,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                 tie_word_embeddings=False):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.max_position_embeddings = max_position_embeddings
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        self.tie_word_embeddings = tie_word_embeddings
        assert hidden_size % num_attention_heads == 0
        assert num_attention_heads % num_key_value_heads == 0
        self.head_dim = hidden_size // num_attention_heads

    def to_hf(self, **extra):
        d = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": "float32",
            "bos_token_id": None,
            "eos_token_id": None,
            "pad_token_id": None,
        }
        d.update(extra)
        return d

    @classmethod
    def from_hf(cls, d):
        keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                "rms_norm_eps", "rope_theta", "tie_word_embeddings"]
        return cls(**{k: d[k] for k in keys if k in d})


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(seq_len, head_dim, theta, dtype, offset=0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    pos = torch.arange(offset, offset + seq_len, dtype=torch.float64)
    ang = torch.outer(pos, inv_freq)
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * hd, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, past=None, chunk=256):
        """x: (B,T,D) for absolute positions P..P+T-1 where P = past length.
        past: optional (k, v) of shape (B, KV, P, hd) (already rotated).
        Returns (out, (k, v)) with k/v covering positions 0..P+T-1."""
        B, T, _ = x.shape
        c = self.c
        hd, H, KV = c.head_dim, c.num_attention_heads, c.num_key_value_heads
        q = self.q_proj(x).view(B, T, H, hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, KV, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        cache = (k, v)
        P = k.shape[2] - T
        if KV != H:
            rep = H // KV
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scale = 1.0 / math.sqrt(hd)
        # causal attention, computed in query chunks so that only the
        # (block-)lower triangle is materialised; mathematically identical.
        outs = []
        for s in range(0, T, chunk):
            e = min(T, s + chunk)
            kk, vv = k[:, :, :P + e], v[:, :, :P + e]
            att = torch.matmul(q[:, :, s:e], kk.transpose(-1, -2)) * scale
            if e - s > 1:  # a single query at the newest position sees every key
                qi = torch.arange(P + s, P + e).unsqueeze(1)
                kj = torch.arange(0, P + e).unsqueeze(0)
                att = att.masked_fill(kj > qi, float("-inf"))
            att = torch.softmax(att, dim=-1)
            outs.append(torch.matmul(att, vv))
        y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
        y = y.transpose(1, 2).reshape(B, T, H * hd)
        return self.o_proj(y), cache


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, cos, sin, past=None):
        a, cache = self.self_attn(self.input_layernorm(x), cos, sin, past)
        x = x + a
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, cache


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

    def init_weights(self, std=0.02, generator=None):
        n = self.c.num_hidden_layers
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                nn.init.ones_(p)
            else:
                s = std / math.sqrt(2 * n) if ("o_proj" in name or "down_proj" in name) else std
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=generator) * s)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.c.tie_word_embeddings else self.lm_head.weight

    def forward(self, idx, return_hidden=False, past=None, return_cache=False):
        """idx: (B,T) token ids at positions P..P+T-1 (P = cached length).
        past: list of per-layer (k, v) from a previous call with return_cache."""
        B, T = idx.shape
        P = 0 if past is None else past[0][0].shape[2]
        x = self.model.embed_tokens(idx)
        cos, sin = rope_cos_sin(T, self.c.head_dim, self.c.rope_theta, x.dtype, offset=P)
        hidden, caches = [x], []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, None if past is None else past[i])
            hidden.append(x)
            caches.append(kv)
        x = self.model.norm(x)
        logits = F.linear(x, self.head_weight())
        out = (logits,)
        if return_hidden:
            out += (hidden,)
        if return_cache:
            out += (caches,)
        return out[0] if len(out) == 1 else out

    # --- HF-layout I/O -----------------------------------------------------
    def hf_state_dict(self):
        sd = {k: v for k, v in self.state_dict().items()}
        if self.c.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        return {k: v.float() for k, v in sd.items()}

    def save_hf(self, outdir, extra_config=None, metadata=None):
        os.makedirs(outdir, exist_ok=True)
        meta = {"format": "pt"}
        if metadata:
            meta.update(metadata)
        save_safetensors(self.hf_state_dict(), os.path.join(outdir, "model.safetensors"), meta)
        tmp = os.path.join(outdir, "config.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.c.to_hf(**(extra_config or {})), f, indent=2)
            f.write("\n")
        os.replace(tmp, os.path.join(outdir, "config.json"))

    @classmethod
    def load_hf(cls, outdir, dtype=torch.float32):
        with open(os.path.join(outdir, "config.json")) as f:
            c = Config.from_hf(json.load(f))
        m = cls(c)
        sd, _ = load_safetensors(os.path.join(outdir, "model.safetensors"))
        missing, unexpected = m.load_state_dict(sd, strict=False)
        assert not unexpected, unexpected
        assert all(k == "lm_head.weight" and c.tie_word_embeddings for k in missing), missing
        return m.to(dtype)
