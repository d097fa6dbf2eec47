#!/usr/bin/python3
"""Write a random-weight checkpoint in a published model's shape: Qwen2-0.5B
(494M weights) or TinyLlama-1.1B (1.1B weights), for memory and cost runs at
real sizes without downloading the published weights.

The folder is laid out as Hugging Face publishes the model: config.json with
the published keys, model.safetensors with LLaMA names ([out, in] matrices),
BF16. Qwen2-0.5B: hidden 896, 24 layers, 14 heads on 2 KV heads, MLP 4,864,
vocabulary 151,936, q/k/v biases, tied embeddings. TinyLlama-1.1B: hidden
2,048, 22 layers, 32 heads on 4 KV heads, MLP 5,632, vocabulary 32,000, an
untied LM head. Matrices are seeded normal(0, 0.02), norm gains 1, biases
normal(0, 0.02): the text is noise, the shapes and so the costs are the
model's. No tokenizer is written: mpcache.json says "tokenizer": "none" (bytes).

Tensors are written one at a time (the file's header is computed from the
shapes first), so the script holds one tensor, not the model.

Needs NumPy (Debian's python3-numpy).
--layers N keeps the first N layers (the same widths and vocabulary): a
smaller model of the same shape, e.g. to run an older build beside this
one where the older cannot hold the whole model.

Usage: /usr/bin/python3 tools/model/make_real_shapes.py --shape qwen2-0.5b|tinyllama-1.1b --out DIR [--seed 1]
           [--layers N]
"""
import argparse
import json
import os

import numpy as np

from make_checkpoints import to_bf16_bits

QWEN2_05B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
    "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21,
    "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
    "use_cache": True, "initializer_range": 0.02, "attention_dropout": 0.0,
}

TINYLLAMA_11B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 2048,
    "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
    "hidden_act": "silu", "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "rope_scaling": None, "tie_word_embeddings": False, "attention_bias": False, "bos_token_id": 1,
    "eos_token_id": 2, "torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": True,
    "initializer_range": 0.02, "pretraining_tp": 1,
}

SHAPES = {"qwen2-0.5b": QWEN2_05B, "tinyllama-1.1b": TINYLLAMA_11B}


def tensor_shapes(c):
    """name -> (shape, kind) in the published layout; kind: 'matrix', 'norm' or 'bias'."""
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    bias = c["model_type"] == "qwen2"
    out = {"model.embed_tokens.weight": ((v, h), "matrix"), "model.norm.weight": ((h,), "norm")}
    if not c["tie_word_embeddings"]:
        out["lm_head.weight"] = ((v, h), "matrix")
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out[p + "input_layernorm.weight"] = ((h,), "norm")
        out[p + "post_attention_layernorm.weight"] = ((h,), "norm")
        for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            out[p + f"self_attn.{name}.weight"] = ((rows, h), "matrix")
            if bias:
                out[p + f"self_attn.{name}.bias"] = ((rows,), "bias")
        out[p + "self_attn.o_proj.weight"] = ((h, q), "matrix")
        out[p + "mlp.gate_proj.weight"] = ((inter, h), "matrix")
        out[p + "mlp.up_proj.weight"] = ((inter, h), "matrix")
        out[p + "mlp.down_proj.weight"] = ((h, inter), "matrix")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0, help="keep the first N layers (default: all)")
    a = ap.parse_args()
    config = dict(SHAPES[a.shape])
    if a.layers:
        if not 0 < a.layers <= config["num_hidden_layers"]:
            ap.error("--layers must be between 1 and %d" % config["num_hidden_layers"])
        config["num_hidden_layers"] = a.layers
        if "max_window_layers" in config:
            config["max_window_layers"] = min(config["max_window_layers"], a.layers)
    shapes = tensor_shapes(config)
    header, offset = {}, 0
    for name in sorted(shapes):
        n = int(np.prod(shapes[name][0])) * 2  # BF16
        header[name] = {"dtype": "BF16", "shape": list(shapes[name][0]), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    weights = 0
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in sorted(shapes):
            shape, kind = shapes[name]
            weights += int(np.prod(shape))
            if kind == "norm":
                x = np.ones(shape, np.float32)
            else:
                x = rng.normal(0, 0.02, shape).astype(np.float32)
            f.write(to_bf16_bits(x).astype("<u2").tobytes())
            del x
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(a.out, "mpcache.json"), "w") as f:
        json.dump({"tokenizer": "none"}, f)
    print(f"wrote {a.out}: {weights:,} weights, {offset:,} bytes")


if __name__ == "__main__":
    main()
