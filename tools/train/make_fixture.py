#!/usr/bin/python3
"""Write a tiny seeded random LLaMA model + reference logits for C++ decoder tests.

Output (default tools/model/fixture/):
  config.json, model.safetensors   same HF layout / conventions as austen-byte
  expected.json                    input byte sequences and float64 reference
                                   logits (every position, last position) and
                                   per-layer hidden states

The reference is computed by the PyTorch model of mini_llama.py in float64
from the float32 weights stored in model.safetensors (i.e. weights widened to
float64 exactly), and cross-checked against an independent, loop-based NumPy
implementation written from the conventions documented in mini_llama.py.

Usage: /usr/bin/python3 tools/train/make_fixture.py [--out DIR] [--seed N]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mini_llama import Config, LlamaLM, load_safetensors  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def numpy_reference(sd, cfg, tokens):
    """Straightforward float64 forward pass, one position / head at a time."""
    W = {k: v.double().numpy() for k, v in sd.items()}
    D, H, KV, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    T = len(tokens)

    def rms(x, w):
        return x / math.sqrt(float(np.mean(x * x)) + cfg.rms_norm_eps) * w

    def rope(vec, p):
        out = np.empty_like(vec)
        half = hd // 2
        for i in range(half):
            ang = p * cfg.rope_theta ** (-2.0 * i / hd)
            c, s = math.cos(ang), math.sin(ang)
            a, b = vec[i], vec[i + half]
            out[i] = a * c - b * s
            out[i + half] = b * c + a * s
        return out

    h = np.stack([W["model.embed_tokens.weight"][t] for t in tokens])
    hidden = [h.copy()]
    for l in range(cfg.num_hidden_layers):
        pre = f"model.layers.{l}."
        xn = np.stack([rms(h[t], W[pre + "input_layernorm.weight"]) for t in range(T)])
        q = xn @ W[pre + "self_attn.q_proj.weight"].T
        k = xn @ W[pre + "self_attn.k_proj.weight"].T
        v = xn @ W[pre + "self_attn.v_proj.weight"].T
        att_out = np.zeros((T, H * hd))
        for hh in range(H):
            g = hh // (H // KV)
            for t in range(T):
                qt = rope(q[t, hh * hd:(hh + 1) * hd], t)
                sc = np.array([rope(k[j, g * hd:(g + 1) * hd], j) @ qt / math.sqrt(hd) for j in range(t + 1)])
                sc = np.exp(sc - sc.max())
                sc /= sc.sum()
                att_out[t, hh * hd:(hh + 1) * hd] = sum(sc[j] * v[j, g * hd:(g + 1) * hd] for j in range(t + 1))
        h = h + att_out @ W[pre + "self_attn.o_proj.weight"].T
        xn = np.stack([rms(h[t], W[pre + "post_attention_layernorm.weight"]) for t in range(T)])
        gt = xn @ W[pre + "mlp.gate_proj.weight"].T
        up = xn @ W[pre + "mlp.up_proj.weight"].T
        h = h + ((gt / (1 + np.exp(-gt))) * up) @ W[pre + "mlp.down_proj.weight"].T
        hidden.append(h.copy())
    hn = np.stack([rms(h[t], W["model.norm.weight"]) for t in range(T)])
    head = W["model.embed_tokens.weight"] if cfg.tie_word_embeddings else W["lm_head.weight"]
    return hn @ head.T, hidden


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tools/model/fixture"))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    cfg = Config(vocab_size=256, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    g = torch.Generator().manual_seed(args.seed)
    m = LlamaLM(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))  # non-trivial norm gains in [0.5, 1.5)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.6 / math.sqrt(p.shape[1])) * 2.0)
    os.makedirs(args.out, exist_ok=True)
    m.save_hf(args.out, metadata={"purpose": "mpcache C++ decoder test fixture", "seed": str(args.seed)})

    # reload from disk (float32) and run in float64
    m64 = LlamaLM.load_hf(args.out, dtype=torch.float64).eval()
    sd, _ = load_safetensors(os.path.join(args.out, "model.safetensors"))

    text1 = b"Emma Woodhou"  # 12 tokens
    text2 = (b"It is a truth universally acknowledged, that a single man in "
             b"possession of a good fortune, must be in want of a wife.")[:100]
    cases = []
    for text, full in ((text1, True), (text2, False)):
        toks = list(text)
        with torch.no_grad():
            logits, hidden = m64(torch.tensor([toks]), return_hidden=True)
        logits = logits[0].numpy()
        ref, ref_hidden = numpy_reference(sd, cfg, toks)
        err = float(np.abs(ref - logits).max())
        herr = max(float(np.abs(a - b[0].numpy()).max()) for a, b in zip(ref_hidden, hidden))
        print(f"case len {len(toks)}: torch vs numpy max |dlogit| {err:.3e}, max |dhidden| {herr:.3e}, "
              f"logit range [{logits.min():.3f}, {logits.max():.3f}], argmax last {int(logits[-1].argmax())}")
        assert err < 1e-9 and herr < 1e-9
        c = {"text": text.decode("ascii"), "tokens": toks, "num_tokens": len(toks),
             "logits_last": [float(v) for v in logits[-1]],
             "argmax_last": int(logits[-1].argmax())}
        if full:
            c["logits_all"] = [[float(v) for v in row] for row in logits]
            c["hidden_states"] = {
                "description": "index 0 = embedding output, index l+1 = residual stream after layer l "
                               "(before the final norm); rows = positions",
                "values": [[[float(v) for v in row] for row in hs[0].numpy()] for hs in hidden]}
        cases.append(c)
    doc = {
        "description": "Reference forward pass of tools/model/fixture (random init, seed %d). "
                       "Computed in float64 from the float32 weights in model.safetensors; positions start at 0; "
                       "full causal attention; RoPE = HF rotate_half convention (see tools/model/MODEL_CARD.md). "
                       "Suggested tolerance for a float64 C++ forward: 1e-9 abs; for float32: 1e-4 abs." % args.seed,
        "config": cfg.to_hf(),
        "cases": cases,
    }
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    # The same logits as plain text for the C++ test (no JSON parser needed there).
    with open(os.path.join(args.out, "expected_logits.txt"), "w") as f:
        f.write("# tokens then logits_all (one row per position), case 0 of expected.json\n")
        f.write(" ".join(map(str, cases[0]["tokens"])) + "\n")
        for row in cases[0]["logits_all"]:
            f.write(" ".join(repr(float(v)) for v in row) + "\n")
    for fn in sorted(os.listdir(args.out)):
        print(f"{fn:20s} {os.path.getsize(os.path.join(args.out, fn)):8d} bytes")


if __name__ == "__main__":
    main()
