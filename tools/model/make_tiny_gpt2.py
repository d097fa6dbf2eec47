#!/usr/bin/python3
"""Write a tiny random-weight GPT-2 checkpoint with a GPT-2 tokenizer, for tests.

The folder is laid out as Hugging Face publishes GPT-2 (config.json,
model.safetensors with `transformer.` names and Conv1D weights stored
[in, out], lm_head tied to wte, vocab.json + merges.txt), only small:

  tokenizer   GPT-2's own byte-level BPE cut down to its first MERGES merges:
              ids 0-255 are GPT-2's byte symbols, 256.. its first merges in
              order (GPT-2's ids are exactly these), then <|endoftext|>, the
              BOS and EOS, as the last id (as 50256 is in GPT-2). Read from
              GPT-2's vocab.json + merges.txt (default
              tests/fixtures/tokenizer/gpt2/).
  model       2 layers, hidden 16, 2 heads, 64 positions, float32, seeded
              random weights.
  expected    expected.json: the prompt, its ids (a plain-Python GPT-2
              encoder, ASCII prompts only), and the float64 greedy
              continuation (full attention, erf GeLU as mpcache's decoder),
              with its text and each step's margin between the best and the
              second-best logit.

The weights are chosen so that generation hits EOS: among seeds whose every
step's margin is at least --margin (so that fixed-point MPC picks the same
tokens), the script takes the first whose greedy continuation's token number
--eos-at (0-based) can be relabelled <|endoftext|> (wte rows swapped: the
model computes the same function of relabelled ids), then recomputes the
continuation on the final weights and checks it.

Plain Python 3 (no NumPy): the model is tiny.
Usage: /usr/bin/python3 tools/model/make_tiny_gpt2.py [--out DIR] [--gpt2 DIR]
"""
import argparse
import json
import math
import os
import random
import re
import struct

from safetensors_writer import write_safetensors

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

HIDDEN, LAYERS, HEADS, INNER, POSITIONS = 16, 2, 2, 64, 64
EPS = 1e-5

# GPT-2's pre-tokenizer pattern restricted to ASCII (the prompt is ASCII:
# there \p{L} is [A-Za-z] and \p{N} is [0-9]).
ASCII_GPT2_PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.inverse = {i: p for p, i in vocab.items()}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.byte_symbol = bytes_to_unicode()
        self.symbol_byte = {s: b for b, s in self.byte_symbol.items()}

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), math.inf), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == math.inf:
                break
            a, b = parts[i], parts[i + 1]
            merged, j = [], 0
            while j < len(parts):  # merge every occurrence of (a, b), left to right
                if j + 1 < len(parts) and parts[j] == a and parts[j + 1] == b:
                    merged.append(a + b)
                    j += 2
                else:
                    merged.append(parts[j])
                    j += 1
            parts = merged
        return [self.vocab[p] for p in parts]

    def encode(self, text):
        assert text.isascii(), "the fixture's encoder handles ASCII only"
        ids = []
        for word in ASCII_GPT2_PATTERN.findall(text):
            ids += self.bpe("".join(self.byte_symbol[b] for b in word.encode()))
        return ids

    def decode_bytes(self, ids, eos):
        return b"".join(bytes(self.symbol_byte[c] for c in self.inverse[i]) for i in ids if i != eos)


def cut_tokenizer(gpt2_dir, merges_kept):
    with open(os.path.join(gpt2_dir, "vocab.json"), encoding="utf-8") as f:
        full = json.load(f)
    with open(os.path.join(gpt2_dir, "merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    header = lines[0]
    merges = [l for l in lines[1:] if l][:merges_kept]
    inverse = {i: p for p, i in full.items()}
    vocab = {}
    for i in range(256):
        vocab[inverse[i]] = i
    for r, m in enumerate(merges):
        a, b = m.split(" ")
        assert inverse[256 + r] == a + b, "GPT-2's id 256+r is its merge r"
        vocab[a + b] = 256 + r
    vocab["<|endoftext|>"] = 256 + len(merges)
    return header, merges, vocab


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def random_weights(seed, vocab_size):
    rng = random.Random(seed)

    def mat(rows, cols, std):
        return [[f32(rng.gauss(0, std)) for _ in range(cols)] for _ in range(rows)]

    def vec(n, mean, std):
        return [f32(mean + rng.gauss(0, std)) for _ in range(n)]

    w = {"wte.weight": mat(vocab_size, HIDDEN, 0.5), "wpe.weight": mat(POSITIONS, HIDDEN, 0.5)}
    for l in range(LAYERS):
        p = f"h.{l}."
        w[p + "ln_1.weight"] = vec(HIDDEN, 1.0, 0.1)
        w[p + "ln_1.bias"] = vec(HIDDEN, 0.0, 0.1)
        w[p + "attn.c_attn.weight"] = mat(HIDDEN, 3 * HIDDEN, 0.3)
        w[p + "attn.c_attn.bias"] = vec(3 * HIDDEN, 0.0, 0.1)
        w[p + "attn.c_proj.weight"] = mat(HIDDEN, HIDDEN, 0.6)
        w[p + "attn.c_proj.bias"] = vec(HIDDEN, 0.0, 0.1)
        w[p + "ln_2.weight"] = vec(HIDDEN, 1.0, 0.1)
        w[p + "ln_2.bias"] = vec(HIDDEN, 0.0, 0.1)
        w[p + "mlp.c_fc.weight"] = mat(HIDDEN, INNER, 0.3)
        w[p + "mlp.c_fc.bias"] = vec(INNER, 0.0, 0.1)
        w[p + "mlp.c_proj.weight"] = mat(INNER, HIDDEN, 0.3)
        w[p + "mlp.c_proj.bias"] = vec(HIDDEN, 0.0, 0.1)
    w["ln_f.weight"] = vec(HIDDEN, 1.0, 0.1)
    w["ln_f.bias"] = vec(HIDDEN, 0.0, 0.1)
    return w


def layer_norm(x, g, b):
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / len(x)
    s = 1.0 / math.sqrt(var + EPS)
    return [(v - mean) * s * gi + bi for v, gi, bi in zip(x, g, b)]


def affine(x, w, b):  # x [in], w [in][out] (Conv1D), b [out]
    out = list(b)
    for xi, row in zip(x, w):
        for o, wv in enumerate(row):
            out[o] += xi * wv
    return out


def gelu(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def logits_last(w, tokens):
    """Float64 GPT-2 forward (full causal attention); the last position's logits."""
    hd = HIDDEN // HEADS
    h = [[a + b for a, b in zip(w["wte.weight"][t], w["wpe.weight"][i])] for i, t in enumerate(tokens)]
    for l in range(LAYERS):
        p = f"h.{l}."
        qkv = [affine(layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"]), w[p + "attn.c_attn.weight"],
                      w[p + "attn.c_attn.bias"]) for x in h]
        atts = []
        for i in range(len(h)):
            att = [0.0] * HIDDEN
            for hh in range(HEADS):
                q = qkv[i][hh * hd:(hh + 1) * hd]
                scores = [sum(a * b for a, b in zip(q, qkv[j][HIDDEN + hh * hd:HIDDEN + (hh + 1) * hd])) / math.sqrt(hd)
                          for j in range(i + 1)]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                z = sum(e)
                for j in range(i + 1):
                    v = qkv[j][2 * HIDDEN + hh * hd:2 * HIDDEN + (hh + 1) * hd]
                    for d in range(hd):
                        att[hh * hd + d] += e[j] / z * v[d]
            atts.append(att)
        for i in range(len(h)):
            out = affine(atts[i], w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
            h[i] = [a + b for a, b in zip(h[i], out)]
        for i in range(len(h)):
            x = layer_norm(h[i], w[p + "ln_2.weight"], w[p + "ln_2.bias"])
            m = [gelu(v) for v in affine(x, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"])]
            out = affine(m, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
            h[i] = [a + b for a, b in zip(h[i], out)]
    x = layer_norm(h[-1], w["ln_f.weight"], w["ln_f.bias"])
    return [sum(a * b for a, b in zip(x, row)) for row in w["wte.weight"]]


def greedy(w, prompt, steps):
    tokens, margins = list(prompt), []
    for _ in range(steps):
        logits = logits_last(w, tokens)
        order = sorted(range(len(logits)), key=lambda i: -logits[i])
        margins.append(logits[order[0]] - logits[order[1]])
        tokens.append(order[0])
    return tokens[len(prompt):], margins


def write_gpt2_safetensors(path, w):
    """F32 tensors under GPT2LMHeadModel's "transformer." names."""
    tensors = {}
    for n, t in w.items():
        shape = [len(t), len(t[0])] if isinstance(t[0], list) else [len(t)]
        flat = [v for row in t for v in row] if isinstance(t[0], list) else t
        tensors["transformer." + n] = ("F32", shape, struct.pack(f"<{len(flat)}f", *flat))
    write_safetensors(path, tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests/fixtures/model/gpt2-tiny"))
    ap.add_argument("--gpt2", default=os.path.join(REPO, "tests/fixtures/tokenizer/gpt2"),
                    help="GPT-2's vocab.json + merges.txt")
    ap.add_argument("--merges", type=int, default=255, help="GPT-2 merges kept (vocabulary: 257 + this)")
    ap.add_argument("--prompt", default="It is a truth universally acknowledged, that a single man")
    ap.add_argument("--steps", type=int, default=8, help="tokens of the expected continuation")
    ap.add_argument("--eos-at", type=int, default=3, help="the continuation's token (0-based) that is EOS")
    ap.add_argument("--margin", type=float, default=0.1, help="least gap between best and second-best logit")
    ap.add_argument("--seed", type=int, default=1, help="first seed tried")
    args = ap.parse_args()

    header, merges, vocab = cut_tokenizer(args.gpt2, args.merges)
    tok = Tokenizer(vocab, merges)
    eos = vocab["<|endoftext|>"]
    vocab_size = len(vocab)
    prompt_ids = tok.encode(args.prompt)
    assert len(prompt_ids) + args.steps <= POSITIONS

    for seed in range(args.seed, args.seed + 2000):
        w = random_weights(seed, vocab_size)
        first, margins = greedy(w, prompt_ids, args.eos_at + 1)
        target = first[args.eos_at]
        if min(margins) < args.margin or target in prompt_ids or target in first[:args.eos_at]:
            continue
        # Relabel: the token chosen at --eos-at becomes <|endoftext|> and vice versa.
        wte = w["wte.weight"]
        wte[target], wte[eos] = wte[eos], wte[target]
        tokens, margins = greedy(w, prompt_ids, args.steps)
        # Past the EOS (--ignore-eos) the text goes on: no second EOS.
        if tokens[args.eos_at] != eos or tokens.count(eos) != 1 or min(margins) < args.margin:
            continue
        # Printable ASCII text, so that tests can match it as it is printed.
        text_all = tok.decode_bytes(tokens, eos).decode("latin-1")
        if not all(" " <= c <= "~" for c in text_all) or len(set(tokens)) < 5:
            continue
        text_until_eos = tok.decode_bytes(tokens[:args.eos_at + 1], eos).decode("latin-1")
        break
    else:
        raise SystemExit("no seed gave margins of %g and an EOS at %d" % (args.margin, args.eos_at))

    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": vocab_size,
        "n_embd": HIDDEN,
        "n_layer": LAYERS,
        "n_head": HEADS,
        "n_inner": INNER,
        "n_positions": POSITIONS,
        "n_ctx": POSITIONS,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": EPS,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_gpt2_safetensors(os.path.join(args.out, "model.safetensors"), w)
    with open(os.path.join(args.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(args.out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(header + "\n" + "\n".join(merges) + "\n")
    expected = {
        "note": "written by tools/model/make_tiny_gpt2.py; float64 greedy continuation, full attention",
        "seed": seed,
        "prompt": args.prompt,
        "prompt_ids": prompt_ids,
        "eos": eos,
        "eos_at": args.eos_at,
        "tokens": tokens,
        "margins": [round(m, 4) for m in margins],
        "text_until_eos": text_until_eos,
        "text": text_all,
    }
    with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"seed {seed}: prompt {len(prompt_ids)} tokens, continuation {tokens} "
          f"(EOS {eos} at {args.eos_at}), least margin {min(margins):.3f}: {text_all!r}")


if __name__ == "__main__":
    main()
