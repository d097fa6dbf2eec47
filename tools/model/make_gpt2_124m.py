#!/usr/bin/python3
"""Write a GPT-2-124M-shaped checkpoint with random weights and GPT-2's real
tokenizer: for runs at paper scale without downloading the published weights.

The folder is laid out as Hugging Face publishes gpt2 (config.json with the
published keys, model.safetensors with bare names and Conv1D weights stored
[in, out], lm_head tied to wte, vocab.json + merges.txt), in BF16 (about
250 MB): 12 layers, hidden 768, 12 heads, MLP 3072, 1,024 positions, the
50,257-token vocabulary. Weights are seeded normal(0, 0.02) as GPT-2's
initialisation, LayerNorm gains 1, biases 0: the text is noise, the costs are
GPT-2's.

Needs NumPy (Debian's python3-numpy).
Usage: /usr/bin/python3 tools/model/make_gpt2_124m.py --out DIR [--seed 1]
"""
import argparse
import json
import os
import shutil

import numpy as np

from make_checkpoints import stored
from safetensors_writer import write_safetensors

CONFIG = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
    "n_head": 12, "n_positions": 1024, "n_ctx": 1024, "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256, "resid_pdrop": 0.1,
    "embd_pdrop": 0.1, "attn_pdrop": 0.1, "initializer_range": 0.02, "torch_dtype": "bfloat16",
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "..", "tests", "fixtures", "tokenizer", "gpt2"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    hs, inter, vocab, pos = 768, 3072, CONFIG["vocab_size"], CONFIG["n_positions"]
    g = lambda *shape: rng.normal(0, 0.02, shape).astype(np.float32)
    w = {"wte.weight": g(vocab, hs), "wpe.weight": g(pos, hs)}
    for l in range(CONFIG["n_layer"]):
        p = f"h.{l}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = np.ones(hs, np.float32), np.zeros(hs, np.float32)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = g(hs, 3 * hs), np.zeros(3 * hs, np.float32)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = g(hs, hs), np.zeros(hs, np.float32)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = np.ones(hs, np.float32), np.zeros(hs, np.float32)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = g(hs, inter), np.zeros(inter, np.float32)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = g(inter, hs), np.zeros(hs, np.float32)
    w["ln_f.weight"], w["ln_f.bias"] = np.ones(hs, np.float32), np.zeros(hs, np.float32)
    tensors = {name: ("BF16", x.shape, stored(x, "BF16")[1]) for name, x in w.items()}
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(a.tokenizer, name), os.path.join(a.out, name))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
