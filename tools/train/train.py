#!/usr/bin/python3
"""Train a small byte-level LLaMA-style LM on Jane Austen (+ synthetic passkey data).

Train set: five novels; held out: Persuasion (evaluation only).
Curriculum: phases of increasing context (e.g. 256 -> 512 -> 2048), given by
--phases "CTX:BATCH:FRACTION[:PASSKEY_FRAC[:COPY_FRAC]],..." where FRACTION is the share of
--steps and PASSKEY_FRAC (default --passkey-frac) the share of passkey samples.
A wall-clock budget (--time-budget-min, including the final evaluation) caps
the run: if the step budget would overrun it, training progress is measured in
time instead (phases and LR schedule advance by elapsed time), so the final
long-context phase still happens and the script always stops on its own.

Outputs (HF LLaMA layout): OUT/config.json, OUT/model.safetensors (checkpointed
every --ckpt-min minutes), OUT/train_log.csv, OUT/eval.json and the model card
(--card).  Run tools/train/extract_austen.py first (or let this script do it).

Example:
  /usr/bin/python3 tools/train/train.py --steps 4000 --time-budget-min 78
"""
import argparse
import csv
import json
import math
import os
import shlex
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mini_llama import Config, LlamaLM, load_safetensors  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TRAIN_NOVELS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey"]
HELDOUT_NOVEL = "persuasion"

# Passkey formats. "plain" (the first runs) states the key twice in words;
# "marker" states it once after a '#' (a byte Austen's text never uses), and
# the question ends with the same '#', which makes retrieval a one-byte
# induction (find the earlier '#', copy what follows), learnable by a small
# byte-level model; the key is still stated once at a random depth and asked
# for at the end.
PASSKEY_FORMATS = {
    "plain": ("The pass key is {k}. Remember it. {k} is the pass key. ",
              "\nWhat is the pass key? The pass key is {k}"),
    "marker": ("The pass key is #{k}. Remember it. ",
               "\nWhat is the pass key? The pass key is #{k}"),
}
NEEDLE, QUESTION = PASSKEY_FORMATS["plain"]


def set_passkey_format(name):
    global NEEDLE, QUESTION
    NEEDLE, QUESTION = PASSKEY_FORMATS[name]


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def load_texts(data_dir):
    need = TRAIN_NOVELS + [HELDOUT_NOVEL]
    if not all(os.path.exists(os.path.join(data_dir, n + ".txt")) for n in need):
        subprocess.run([sys.executable, os.path.join(HERE, "extract_austen.py"), "--out", data_dir], check=True)
    rd = lambda n: open(os.path.join(data_dir, n + ".txt"), "rb").read()  # noqa: E731
    train = b"\n\n\n".join(rd(n) for n in TRAIN_NOVELS)
    held = rd(HELDOUT_NOVEL)
    return np.frombuffer(train, dtype=np.uint8), np.frombuffer(held, dtype=np.uint8)


def make_passkey(text, total_len, rng, depth=None, key=None):
    """Austen filler with a passkey sentence at `depth` (0..1) and the question at
    the end; returns (uint8 array of exactly total_len bytes, answer_len=5).
    The last 5 bytes are the key digits."""
    if key is None:
        key = int(rng.integers(10000, 100000))
    if depth is None:
        depth = float(rng.random())
    ks = "%05d" % key
    needle = NEEDLE.format(k=ks).encode()
    question = QUESTION.format(k=ks).encode()
    flen = total_len - len(needle) - len(question)
    assert flen > 0, "sequence too short for passkey"
    start = int(rng.integers(0, len(text) - flen - 1))
    filler = text[start:start + flen].tobytes()
    pos = int(round(depth * flen))
    # snap to the start of a word (after a space/newline), within the filler
    while 0 < pos < flen and filler[pos - 1] not in b" \n":
        pos += 1
    seq = filler[:pos] + needle + filler[pos:] + question
    assert len(seq) == total_len
    return np.frombuffer(seq, dtype=np.uint8), 5


# Digits and capitals: rare in Austen's prose, so the only earlier match of
# a drill byte is (almost always) inside the drill string itself.
COPY_ALPHABET = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8)


def make_copy(text, total_len, rng):
    """Induction drill: a random string of 8 bytes up to half the sequence
    after a '#' at a random depth of Austen filler, repeated after '#' at the
    end. Unlike a 5-digit passkey, every byte of the repeat is predictable only
    by copying, so one sample carries dozens of supervised copy steps; this is
    what makes a small model form the induction circuit that passkey
    retrieval needs."""
    m = int(rng.integers(8, max(9, min(256, (total_len - 4) // 2))))
    r = COPY_ALPHABET[rng.integers(0, len(COPY_ALPHABET), m)].tobytes()
    needle, question = b"#" + r + b" ", b"\n#" + r
    flen = total_len - len(needle) - len(question)
    start = int(rng.integers(0, len(text) - flen - 1))
    filler = text[start:start + flen].tobytes()
    pos = int(rng.integers(0, flen + 1))
    seq = filler[:pos] + needle + filler[pos:] + question
    assert len(seq) == total_len
    return np.frombuffer(seq, dtype=np.uint8), m


def get_batch(text, ctx, batch, passkey_frac, rng, copy_frac=0.0):
    """Returns x (B,ctx), y (B,ctx) int64 and mask of answer positions in y."""
    x = np.empty((batch, ctx + 1), dtype=np.int64)
    ans = np.zeros((batch, ctx), dtype=bool)
    for b in range(batch):
        u = rng.random()
        if u < passkey_frac + copy_frac:
            seq, na = (make_passkey if u < passkey_frac else make_copy)(text, ctx + 1, rng)
            x[b] = seq
            ans[b, ctx - na:] = True
        else:
            s = int(rng.integers(0, len(text) - ctx - 1))
            x[b] = text[s:s + ctx + 1]
    xt = torch.from_numpy(x)
    return xt[:, :-1].contiguous(), xt[:, 1:].contiguous(), torch.from_numpy(ans)


# ---------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------
@torch.no_grad()
def eval_ppl(model, text, ctx, batch=4, max_windows=None):
    """Non-overlapping windows of ctx+1 bytes (ctx predictions each) over `text`."""
    model.eval()
    n = (len(text) - 1) // ctx
    if max_windows:
        n = min(n, max_windows)
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        rows = [text[j * ctx:j * ctx + ctx + 1] for j in range(i, min(n, i + batch))]
        x = torch.from_numpy(np.stack(rows).astype(np.int64))
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += float(loss)
        cnt += x[:, 1:].numel()
    model.train()
    nll = tot / cnt
    return {"ctx": ctx, "windows": n, "tokens": cnt, "nll_nats_per_byte": nll,
            "bits_per_byte": nll / math.log(2), "ppl_per_byte": math.exp(nll)}


@torch.no_grad()
def eval_passkey(model, text, total_len, n, seed, batch=10):
    """Greedy-decode the 5 key digits after the question; full attention.
    total_len = prompt + 5 answer bytes."""
    model.eval()
    rng = np.random.default_rng(seed)
    seqs, depths = [], []
    for i in range(n):
        d = (i + rng.random()) / n  # stratified depths covering [0, 1)
        s, _ = make_passkey(text, total_len, rng, depth=d)
        seqs.append(s)
        depths.append(d)
    seqs = np.stack(seqs).astype(np.int64)
    correct, digit_correct = [], 0
    for i in range(0, n, batch):
        ref = torch.from_numpy(seqs[i:i + batch])
        logits, cache = model(ref[:, :-5], return_cache=True)  # prefill, then KV-cached greedy steps
        gen = []
        for j in range(5):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            gen.append(nxt)
            if j < 4:
                logits, cache = model(nxt, past=cache, return_cache=True)
        gen, ans = torch.cat(gen, dim=1), ref[:, -5:]
        digit_correct += int((gen == ans).sum())
        correct += (gen == ans).all(dim=1).tolist()
    model.train()
    buckets = []
    for b in range(5):
        sel = [c for c, d in zip(correct, depths) if b / 5 <= d < (b + 1) / 5]
        buckets.append(sum(sel) / max(1, len(sel)))
    return {"total_len": total_len, "n": n, "accuracy": sum(correct) / n,
            "digit_accuracy": digit_correct / (5 * n), "accuracy_by_depth_quintile": buckets}


# ---------------------------------------------------------------------------
def parse_phases(s, default_passkey_frac):
    """ctx:batch:fraction[:passkey_frac[:copy_frac]] per phase; the optional
    fourth and fifth fields let a curriculum start with copy drills and
    passkeys at short context (where retrieval is learned) and dilute them
    later."""
    out = []
    for part in s.split(","):
        fields = part.split(":")
        c, b, f = fields[:3]
        pk = float(fields[3]) if len(fields) > 3 else default_passkey_frac
        cp = float(fields[4]) if len(fields) > 4 else 0.0
        assert pk + cp <= 1.0, f"phase {part}: passkey + copy fractions exceed 1"
        out.append((int(c), int(b), float(f), pk, cp))
    tot = sum(f for _, _, f, _, _ in out)
    return [(c, b, f / tot, pk, cp) for c, b, f, pk, cp in out]


def phase_at(phases, progress):
    acc = 0.0
    for i, (c, b, f, _, _) in enumerate(phases):
        acc += f
        if progress < acc or i == len(phases) - 1:
            return i
    return len(phases) - 1


def fmt_arch(c, nparams):
    return (f"{c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} query heads x "
            f"head_dim {c.head_dim}, {c.num_key_value_heads} KV heads (GQA), SiLU-gated MLP "
            f"intermediate {c.intermediate_size}, vocab {c.vocab_size} (raw bytes), "
            f"{'tied' if c.tie_word_embeddings else 'untied'} embeddings, {nparams:,} parameters")


def write_card(path, out_dir, args, cfg, nparams, state, ev=None):
    rel = os.path.relpath(out_dir, os.path.dirname(path))
    status = "final" if ev is not None else f"IN PROGRESS / interrupted checkpoint (step {state['step']})"
    L = []
    L.append("# austen-byte: byte-level LLaMA-style LM trained on Jane Austen\n")
    L.append(f"Status: **{status}**. Files: `{rel}/config.json`, `{rel}/model.safetensors` "
             f"(Hugging Face LLaMA naming, float32), `{rel}/train_log.csv`, `{rel}/eval.json`.\n")
    L.append("## Architecture\n")
    L.append("- " + fmt_arch(cfg, nparams))
    L.append(f"- max_position_embeddings {cfg.max_position_embeddings} (trained up to 2048), "
             f"rms_norm_eps {cfg.rms_norm_eps}, rope_theta {cfg.rope_theta:g}, no biases anywhere.")
    L.append("- Pre-norm blocks: `h += o_proj(attn(input_layernorm(h)))`, "
             "`h += down_proj(silu(gate_proj(x)) * up_proj(x))` with `x = post_attention_layernorm(h)`; "
             "`logits = lm_head(norm(h))`" + (" (lm_head = embed_tokens, tied)." if cfg.tie_word_embeddings
                                              else " (`lm_head.weight` stored separately: untied)."))
    L.append("- RMSNorm: `x / sqrt(mean(x^2) + eps) * weight`.")
    L.append("- Attention: `q,k,v = x W^T` (weights `[out, in]`, PyTorch Linear layout); head `h` is rows "
             "`h*head_dim .. (h+1)*head_dim-1` of the q/k/v projection; query head `h` uses KV head "
             f"`h // {cfg.num_attention_heads // cfg.num_key_value_heads}`; scores scaled by `1/sqrt(head_dim)`, causal softmax.")
    L.append("- **RoPE: Hugging Face `rotate_half` (non-interleaved / NeoX) convention**, applied to q and k per head: "
             "`inv_freq[i] = theta^(-2i/head_dim)` for `i < head_dim/2`; `ang = pos * inv_freq` (pos from 0); "
             "`cos = concat(cos(ang), cos(ang))`, same for sin; `rotate_half(x) = concat(-x[d/2:], x[:d/2])`; "
             "`x' = x*cos + rotate_half(x)*sin`. Dimension `i` is paired with `i + head_dim/2` (NOT adjacent pairs). "
             "Weights are stored exactly as used (no permutation), as in HF `LlamaForCausalLM`.")
    L.append("- Tokenizer: none; token id = byte value (0..255), UTF-8/ASCII bytes. No BOS/EOS. The folder says so "
             "in `mpcache.json` (`{\"tokenizer\": \"none\"}`), so `mpcache generate` needs no `--tokenizer`.\n")
    L.append("## Data\n")
    L.append("- Six novels from Debian package `r-cran-janeaustenr` (extracted by `tools/train/extract_austen.py`, "
             "R lines joined with `\\n`). Train: Sense and Sensibility, Pride and Prejudice, Mansfield Park, Emma, "
             "Northanger Abbey (joined with blank lines, random crops). Held out: **Persuasion** (evaluation only).")
    L.append(f"- Synthetic passkey sequences ({args.passkey_frac:.0%} of training sequences): Austen filler with "
             f"`{NEEDLE.format(k='NNNNN')!r}` inserted at a uniform random depth (word boundary), ending with "
             f"`{QUESTION.format(k='NNNNN')!r}`; full-sequence LM loss plus {args.answer_weight} x mean loss on the "
             "5 answer digits.")
    L.append("- Induction drills (share per phase: fifth field of `--phases`): a random string of digits and "
             "capitals (8 bytes up to half the sequence) after a '#' at a random depth of Austen filler, repeated "
             "after '\\n#' at the end; the repeat's bytes count as answer bytes.\n")
    L.append("## Training\n")
    L.append("```\n" + state["command"] + "\n```\n")
    L.append(f"- seed {args.seed}; phases (ctx:batch:fraction-of-steps[:passkey share[:drill share]]) `{args.phases}`; AdamW lr {args.lr} "
             f"(betas 0.9/0.95, wd {args.weight_decay} on matrices), {args.warmup} warmup steps, cosine to "
             f"{args.min_lr_frac} x lr; grad clip 1.0; torch {torch.__version__}, {args.threads} CPU thread(s).")
    L.append(f"- steps done {state['step']} (planned {args.steps}); tokens seen {state['tokens']:,}; "
             f"training wall time {state['train_time'] / 60:.1f} min; mean throughput "
             f"{state['tokens'] / max(1e-9, state['train_time']):.0f} tokens/s"
             + ("; **time budget cut the step plan** (progress measured by time)" if state.get("time_bound") else "") + ".")
    L.append(f"- final training loss (mean of last {state['loss_window']} steps, ctx {state['ctx']}): "
             f"{state['final_loss']:.4f} nats/byte ({state['final_loss'] / math.log(2):.3f} bits/byte); "
             f"answer-digit loss {state['final_ans_loss']:.4f}.")
    if ev is not None:
        L.append(f"- total wall time including evaluation: {ev['total_wall_min']:.1f} min.\n")
        L.append("## Evaluation (held-out Persuasion)\n")
        L.append("| metric | value |\n| --- | --- |")
        for p in ev["ppl"]:
            L.append(f"| perplexity per byte, ctx {p['ctx']} (non-overlapping windows, {p['tokens']:,} bytes) | "
                     f"{p['ppl_per_byte']:.4f} ({p['bits_per_byte']:.4f} bits/byte) |")
        for p in ev["passkey"]:
            L.append(f"| passkey exact-match, {p['total_len']} tokens, n={p['n']}, greedy 5 digits, full attention | "
                     f"{p['accuracy']:.3f} (digit acc {p['digit_accuracy']:.3f}; by depth quintile "
                     f"{', '.join('%.2f' % a for a in p['accuracy_by_depth_quintile'])}) |")
        L.append("\nPasskey prompts: Persuasion filler + needle at stratified random depth, total length "
                 "(prompt + 5 answer bytes) exactly the stated number of tokens; keys uniform in 10000..99999; "
                 f"eval rng seed = seed + 1 + length ({args.seed} + 1 + L).\n")
    else:
        L.append("")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(L) + "\n")
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mpcache", "austen"))
    ap.add_argument("--out", default=os.path.join(REPO, "tools/model/austen-byte"))
    ap.add_argument("--card", default=os.path.join(REPO, "tools/model/MODEL_CARD.md"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--max-pos", type=int, default=4096)
    ap.add_argument("--tied", action="store_true", help="tie lm_head to embed_tokens")
    ap.add_argument("--init", default="", help="continue from the weights of this checkpoint dir "
                    "(its config must match the size flags)")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--phases", default="256:16:0.45,512:8:0.25,1024:4:0.1,2048:2:0.2")
    ap.add_argument("--time-budget-min", type=float, default=78.0, help="total wall budget incl. final eval")
    ap.add_argument("--eval-reserve-min", type=float, default=9.0, help="part of the budget kept for final eval")
    ap.add_argument("--lr", type=float, default=2.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--passkey-frac", type=float, default=0.3)
    ap.add_argument("--answer-weight", type=float, default=3.0)
    ap.add_argument("--passkey-format", choices=sorted(PASSKEY_FORMATS), default="plain")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--ckpt-min", type=float, default=5.0)
    ap.add_argument("--eval-keys", type=int, default=100)
    ap.add_argument("--eval-lens", default="1024,2048")
    ap.add_argument("--eval-max-windows", type=int, default=0, help="0 = whole held-out novel")
    args = ap.parse_args()
    set_passkey_format(args.passkey_format)

    t0 = time.time()
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    train_text, held_text = load_texts(args.data_dir)
    print(f"train bytes {len(train_text):,}  held-out (persuasion) bytes {len(held_text):,}", flush=True)

    cfg = Config(vocab_size=256, hidden_size=args.hidden, intermediate_size=args.intermediate,
                 num_hidden_layers=args.layers, num_attention_heads=args.heads,
                 num_key_value_heads=args.kv_heads, max_position_embeddings=args.max_pos,
                 tie_word_embeddings=args.tied)
    model = LlamaLM(cfg)
    g = torch.Generator().manual_seed(args.seed)
    model.init_weights(0.02, g)
    if args.init:
        sd, _ = load_safetensors(os.path.join(args.init, "model.safetensors"))
        missing, unexpected = model.load_state_dict(sd, strict=False)
        assert not unexpected and all(k == "lm_head.weight" and cfg.tie_word_embeddings
                                      for k in missing), (missing, unexpected)
        print(f"initialised from {args.init}", flush=True)
    nparams = sum(p.numel() for p in model.parameters())
    print("model:", fmt_arch(cfg, nparams), flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    phases = parse_phases(args.phases, args.passkey_frac)
    train_budget = (args.time_budget_min - args.eval_reserve_min) * 60.0
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, "train_log.csv")
    logf = open(log_path, "w", newline="")
    logw = csv.writer(logf)
    logw.writerow(["step", "tokens", "elapsed_s", "ctx", "batch", "lr", "loss", "answer_loss", "tok_per_s", "val_bpb_ctx512"])
    command = "/usr/bin/python3 " + shlex.join([os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])
    state = {"step": 0, "tokens": 0, "train_time": 0.0, "command": command, "time_bound": False,
             "final_loss": float("nan"), "final_ans_loss": float("nan"), "loss_window": 0, "ctx": 0}
    hist, ans_hist = [], []
    t_train0 = time.time()
    last_ckpt = t_train0
    last_log_t, last_log_tok = t_train0, 0
    step = 0
    cur_phase = -1

    def checkpoint(final=False):
        model.save_hf(args.out, metadata={"step": str(step), "final": str(final)})
        with open(os.path.join(args.out, "mpcache.json"), "w") as f:  # tokens are bytes: no tokenizer files
            f.write('{\n  "tokenizer": "none"\n}\n')
        write_card(args.card, args.out, args, cfg, nparams, state)

    model.train()
    while True:
        elapsed = time.time() - t_train0
        p_step = step / args.steps
        p_time = elapsed / train_budget
        if p_time > p_step and not state["time_bound"] and step > 0:
            state["time_bound"] = True
            print(f"[step {step}] time budget binds: progress now measured by wall time", flush=True)
        progress = max(p_step, p_time)
        if progress >= 1.0:
            break
        ph = phase_at(phases, progress)
        ctx, bs, _, pk_frac, copy_frac = phases[ph]
        if ph != cur_phase:
            print(f"[step {step}] phase {ph}: ctx {ctx} batch {bs} passkey {pk_frac} copy {copy_frac}", flush=True)
            cur_phase = ph
            hist, ans_hist = [], []
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            lr = args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
        for gr in opt.param_groups:
            gr["lr"] = lr

        x, y, ans = get_batch(train_text, ctx, bs, pk_frac, rng, copy_frac)
        logits = model(x)
        ce = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="none").view(bs, ctx)
        loss = ce.mean()
        total = loss
        a_loss = None
        if ans.any():
            a_loss = ce[ans].mean()
            total = loss + args.answer_weight * a_loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        state["tokens"] += bs * ctx
        hist.append(float(loss))
        if a_loss is not None:
            ans_hist.append(float(a_loss))
        hist, ans_hist = hist[-100:], ans_hist[-100:]

        now = time.time()
        do_ckpt = now - last_ckpt >= args.ckpt_min * 60
        if step % args.log_every == 0 or do_ckpt:
            tps = (state["tokens"] - last_log_tok) / max(1e-9, now - last_log_t)
            last_log_t, last_log_tok = now, state["tokens"]
            ml = sum(hist[-args.log_every:]) / len(hist[-args.log_every:])
            al = sum(ans_hist[-20:]) / len(ans_hist[-20:]) if ans_hist else float("nan")
            val = ""
            if do_ckpt:
                val = eval_ppl(model, held_text, 512, batch=8, max_windows=32)["bits_per_byte"]
            print(f"step {step:6d} ctx {ctx:4d} lr {lr:.2e} loss {ml:.4f} ({ml / math.log(2):.3f} bpb) "
                  f"ans_loss {al:.3f} tok/s {tps:.0f} elapsed {(now - t0) / 60:.1f}m"
                  + (f" val_bpb@512 {val:.3f}" if val != "" else ""), flush=True)
            logw.writerow([step, state["tokens"], round(now - t0, 1), ctx, bs, f"{lr:.3e}", f"{ml:.5f}",
                           f"{al:.5f}", round(tps), f"{val:.5f}" if val != "" else ""])
            logf.flush()
        state.update(step=step, train_time=time.time() - t_train0, ctx=ctx,
                     final_loss=sum(hist[-50:]) / len(hist[-50:]), loss_window=len(hist[-50:]),
                     final_ans_loss=sum(ans_hist[-50:]) / len(ans_hist[-50:]) if ans_hist else float("nan"))
        if do_ckpt:
            checkpoint()
            last_ckpt = time.time()
            print(f"[step {step}] checkpoint written to {args.out}", flush=True)

    state["train_time"] = time.time() - t_train0
    checkpoint()
    print(f"training done: {step} steps, {state['tokens']:,} tokens in {state['train_time'] / 60:.1f} min, "
          f"final loss {state['final_loss']:.4f}", flush=True)

    # ---- final evaluation ---------------------------------------------------
    ev = {"ppl": [], "passkey": []}
    lens = [int(v) for v in args.eval_lens.split(",") if v]
    mw = args.eval_max_windows or None
    for L_ in lens:
        te = time.time()
        r = eval_ppl(model, held_text, L_, batch=max(1, 4096 // L_), max_windows=mw)
        ev["ppl"].append(r)
        print(f"eval ppl ctx {L_}: {r['ppl_per_byte']:.4f} ({r['bits_per_byte']:.4f} bpb) [{time.time() - te:.0f}s]", flush=True)
    for L_ in lens:
        te = time.time()
        r = eval_passkey(model, held_text, L_, args.eval_keys, seed=args.seed + 1 + L_)
        ev["passkey"].append(r)
        print(f"eval passkey len {L_}: acc {r['accuracy']:.3f} digit {r['digit_accuracy']:.3f} "
              f"by depth {r['accuracy_by_depth_quintile']} [{time.time() - te:.0f}s]", flush=True)
    ev["total_wall_min"] = (time.time() - t0) / 60
    ev["train"] = {k: v for k, v in state.items()}
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(ev, f, indent=2)
        f.write("\n")
    model.save_hf(args.out, metadata={"step": str(step), "final": "True"})
    write_card(args.card, args.out, args, cfg, nparams, state, ev)
    print(f"done in {ev['total_wall_min']:.1f} min; card: {args.card}", flush=True)


if __name__ == "__main__":
    main()
