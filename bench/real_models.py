#!/usr/bin/python3
"""Preset real-models: checkpoints in published shapes over three processes.

Runs `mpcache generate` (the local launcher: three party processes on
loopback) on each model folder given, with --compact-weights (unless
--full-weights), a 64-token
prompt (--tokenizer none: 64 bytes) and --tokens N --ignore-eos, and writes
one JSON row per model to stdout: time to first token (prefill), per
decoded token latency, bytes of the busiest party and rounds, and per party
its peak RSS, the bytes of weights it holds and bytes per weight (of the
checkpoint's weight count), with the date and the commit.

The folders come from tools/model/make_real_shapes.py (random weights in
Qwen2-0.5B's and TinyLlama-1.1B's shapes) or make_gpt2_124m.py. Each party
process runs under an address-space limit (--limit-gb, inherited from the
launcher), so that a run that outgrows it fails instead of pressing the
machine into the OOM killer.

Usage:
  /usr/bin/python3 tools/model/make_real_shapes.py --shape qwen2-0.5b --out /tmp/qwen2-05b
  /usr/bin/python3 bench/real_models.py --mpcache build/release/tools/mpcache \\
      --model qwen2-0.5b=/tmp/qwen2-05b [--model NAME=DIR ...] [--tokens 4] > bench/results/real-models.jsonl
"""
import argparse
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile

from generate_runs import commit, run_generate

PROMPT = "It is a truth universally acknowledged, that a single man in pos"  # 64 tokens with --tokenizer none


def run_model(mpcache, name, folder, tokens, limit_gb, extra, label, commit_id, compact=True):
    with tempfile.TemporaryDirectory() as tmp:
        prompt = os.path.join(tmp, "prompt.txt")
        with open(prompt, "w") as f:
            f.write(PROMPT)
        cmd = ["prlimit", "--as=%d" % int(limit_gb * 1e9), mpcache, "generate", "--model", folder,
               "--tokenizer", "none", "--prompt-file", prompt, "--tokens", str(tokens), "--ignore-eos"] + \
              (["--compact-weights"] if compact else []) + extra
        summary, parties = run_generate(cmd, name)
    row = row_of(name, folder, label, commit_id, compact, "3 processes", [p["peak_rss_kb"] for p in parties])
    weights = row["weights"]
    row.update({"prompt_tokens": summary["prompt_length"], "decode_steps": summary["decode_steps"],
                "ttft_s": summary["prefill_latency_s"], "prefill_bytes_max_party": summary["prefill_bytes_max_party"],
                "prefill_rounds": summary["prefill_rounds"], "token_s": summary["decode_latency_s_mean"],
                "token_bytes_max_party": summary["decode_bytes_max_party_mean"],
                "token_rounds": summary["decode_rounds_mean"]})
    for p in parties:
        i = p["party"]
        if "weight_bytes" in p:  # builds before it do not report it
            row["weight_bytes_party%d" % i] = p["weight_bytes"]
            row["bytes_per_weight_party%d" % i] = round(p["weight_bytes"] / weights, 3)
    return row


def run_serve(mpcache, name, folder, tokens, limit_gb, label, commit_id, compact=True):
    """The service: `mpcache serve --local` (three serve processes), one
    client session, then Ctrl-C; each server's --report gives its peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = ["prlimit", "--as=%d" % int(limit_gb * 1e9), mpcache, "serve", "--local", "--model", folder,
               "--report", report] + (["--compact-weights"] if compact else [])
        sys.stderr.write(" ".join(cmd) + "\n")
        service = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client = None
        try:
            for line in service.stdout:  # until the ready banner prints the client's command
                sys.stderr.write(line)
                if line.strip().startswith("client:"):
                    client = shlex.split(line.split(":", 1)[1])
                    break
            if client is None:
                raise SystemExit("%s: serve --local ended before it was ready (exit %s)" % (name, service.wait()))
            client = client[:client.index("--prompt")] + ["--tokenizer", "none", "--prompt", PROMPT, "--tokens",
                                                          str(tokens), "--ignore-eos", "--json",
                                                          os.path.join(tmp, "client.json")]
            done = subprocess.run(client, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit("%s: mpcache client exited %d: %s" % (name, done.returncode, done.stderr[-2000:]))
            result = json.load(open(os.path.join(tmp, "client.json")))
        finally:
            service.send_signal(signal.SIGINT)
            rest, _ = service.communicate(timeout=120)
            sys.stderr.write(rest[-2000:])
        servers = [json.load(open(os.path.join(tmp, "report.server%d.json" % i))) for i in range(3)]
    row = row_of(name, folder, label, commit_id, compact, "3 serve processes, 1 client",
                 [r["peak_rss_kb"] for r in servers])
    row.update({"job": "serve", "prompt_tokens": len(PROMPT.encode()), "tokens": tokens,
                "setup_s": max(r["setup_seconds"] for r in servers), "ttft_s": result["seconds_to_first_token"],
                "token_s": sum(result["token_seconds"]) / max(1, len(result["token_seconds"]))})
    return row


def row_of(name, folder, label, commit_id, compact, parties, peak_rss_kb):
    """What every row says: the model, the build, and each party's peak RSS
    (in party order) in bytes and per checkpoint weight."""
    weights = weights_of(folder)
    row = {"preset": "real-models", "model": name, "date": datetime.date.today().isoformat(),
           "commit": commit_id or commit(), "parties": parties, "compact_weights": compact, "weights": weights}
    if label:
        row["build"] = label
    for i, kb in enumerate(peak_rss_kb):
        row["peak_rss_bytes_party%d" % i] = kb * 1024
        row["peak_rss_per_weight_party%d" % i] = round(kb * 1024 / weights, 3)
    return row


def weights_of(folder):
    """Elements of the checkpoint's tensors (model.safetensors' header)."""
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    count = 0
    for name, t in header.items():
        if name == "__metadata__" or name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        size = 1
        for d in t["shape"]:
            size *= d
        count += size
    return count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpcache", default="build/release/tools/mpcache")
    ap.add_argument("--model", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit per party process")
    ap.add_argument("--label", default="release", help="a name for the binary, kept in each row (a baseline's)")
    ap.add_argument("--commit", default="", help="the binary's commit, where it is not this checkout's HEAD")
    ap.add_argument("--full-weights", action="store_true",
                    help="without --compact-weights: every party keeps both components (16 bytes per weight), nothing "
                         "is redrawn; beside a compact run of the same model, the difference is the redraw's cost")
    ap.add_argument("--job", choices=["generate", "serve"], default="generate",
                    help="generate (the local launcher) or serve (serve --local, one client session)")
    ap.add_argument("extra", nargs="*", help="more flags for mpcache generate (after --)")
    a = ap.parse_args()
    assert len(PROMPT.encode()) == 64
    for spec in a.model:
        name, folder = spec.split("=", 1)
        if a.job == "serve":
            row = run_serve(a.mpcache, name, folder, a.tokens, a.limit_gb, a.label, a.commit, not a.full_weights)
        else:
            row = run_model(a.mpcache, name, folder, a.tokens, a.limit_gb, a.extra, a.label, a.commit,
                            not a.full_weights)
        print(json.dumps(row, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
