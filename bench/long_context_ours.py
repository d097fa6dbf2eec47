#!/usr/bin/python3
"""Preset long-context-ours: long prompts on our Austen model, for real.

Runs `mpcache generate` (the local launcher: three party processes on
loopback, the given emulated link) on held-out text of *Persuasion*
(never trained on) at each prompt length in bytes (our model reads bytes:
one token a byte), for each policy arm: the full cache and MPCache at a
budget of a share of the prompt (10% and 20% by default). The prompt is
prefilled under MPC, MPCache's prefill-stage work (the clusters' summaries;
static eviction where an option set has it) runs, then --tokens tokens are
decoded. One JSON row per run on stdout:

  ttft_s: the prefill step's latency (it also chooses the first token);
  prefill_bytes_max_party, prefill_rounds;
  token_s, token_bytes_max_party, token_rounds: means over the decode steps;
  model_lan_s / model_wan_s (prefill and per token): rounds x RTT + the
    busiest party's bytes / bandwidth, the paper's LAN (0.3 ms, 377 MB/s)
    and WAN (40 ms, 37.5 MB/s), no compute: beside the measured wall time;
  peak_rss_bytes per party (0 client, 1 model owner, 2 helper);
  prefill_stage_share_bytes / _s (MPCache rows): what the policy's
    prefill-stage work adds to the prefill against the full cache's prefill
    of the same prompt in the same run, (mpcache - full) / full.

Our model was trained on at most 2,048 positions: rows beyond that length
measure cost only (their text is not expected to be good).

Usage (release build):
  /usr/bin/python3 tools/train/extract_austen.py --out /tmp/austen
  /usr/bin/python3 bench/long_context_ours.py --text /tmp/austen/persuasion.txt \\
      [--lengths 1000,2000,4000] [--budgets 0.1,0.2] [--tokens 4] [--link lan] > rows.jsonl
"""
import argparse
import datetime
import json
import os
import tempfile

from generate_runs import commit, run_generate

LAN = (0.3e-3, 377e6)  # RTT s, bytes/s (the paper's LAN)
WAN = (40e-3, 37.5e6)  # 40 ms, 300 Mbit/s


def modelled(rounds, bytes_, link):
    rtt, bandwidth = link
    return rounds * rtt + bytes_ / bandwidth


def prompt_of(text_file, offset, length):
    with open(text_file, "rb") as f:
        data = f.read()
    if offset + length > len(data):
        raise SystemExit("%s: %d bytes, too short for %d bytes from %d" % (text_file, len(data), length, offset))
    return data[offset:offset + length]


def run(mpcache, model, prompt, policy, budget, tokens, link, extra):
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        with open(prompt_file, "wb") as f:
            f.write(prompt)
        cmd = [mpcache, "generate", "--prompt-file", prompt_file, "--tokenizer", "none", "--tokens", str(tokens),
               "--ignore-eos", "--policy", policy, "--link", link] + \
              (["--model", model] if model else []) + (["--budget", str(budget)] if budget else []) + extra
        return run_generate(cmd, "%s at %d bytes" % (policy, len(prompt)))


def row_of(run_rows, model, arm, policy, budget, length, link, commit_id):
    summary, parties = run_rows
    pre_bytes, pre_rounds = summary["prefill_bytes_max_party"], summary["prefill_rounds"]
    tok_bytes, tok_rounds = summary["decode_bytes_max_party_mean"], summary["decode_rounds_mean"]
    return {"preset": "long-context-ours", "model": os.path.basename(os.path.normpath(model)) if model else "austen-byte",
            "arm": arm, "policy": policy,
            "budget_tokens": budget or length, "prompt_bytes": length, "link": link,
            "date": datetime.date.today().isoformat(), "commit": commit_id, "parties": "3 processes",
            "cache": "prefill", "truncation": summary.get("truncation", "exact"),
            "comparisons": summary.get("comparisons", "circuit"),
            "ttft_s": summary["prefill_latency_s"], "prefill_bytes_max_party": pre_bytes, "prefill_rounds": pre_rounds,
            "prefill_model_lan_s": modelled(pre_rounds, pre_bytes, LAN),
            "prefill_model_wan_s": modelled(pre_rounds, pre_bytes, WAN),
            "decode_steps": summary["decode_steps"], "token_s": summary["decode_latency_s_mean"],
            "token_bytes_max_party": tok_bytes, "token_rounds": tok_rounds,
            "token_model_lan_s": modelled(tok_rounds, tok_bytes, LAN),
            "token_model_wan_s": modelled(tok_rounds, tok_bytes, WAN),
            "peak_rss_bytes": [p["peak_rss_kb"] * 1024 for p in parties]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpcache", default="build/release/tools/mpcache")
    ap.add_argument("--model", default="", help="a byte-level model folder (default: mpcache generate's, our Austen model)")
    ap.add_argument("--text", required=True, help="held-out text (Persuasion, from tools/train/extract_austen.py)")
    ap.add_argument("--offset", type=int, default=0, help="where in --text the prompts start")
    ap.add_argument("--lengths", default="1000,2000,4000", help="prompt lengths in bytes (tokens)")
    ap.add_argument("--budgets", default="0.1,0.2", help="MPCache's budgets, shares of the prompt")
    ap.add_argument("--policy", default="mpcache", help="the MPCache option set (a --policy of mpcache generate)")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--link", default="lan")
    ap.add_argument("extra", nargs="*", help="more flags for mpcache generate (after --)")
    a = ap.parse_args()
    commit_id = commit()
    for length in (int(x) for x in a.lengths.split(",")):
        prompt = prompt_of(a.text, a.offset, length)
        full = row_of(run(a.mpcache, a.model, prompt, "full", 0, a.tokens, a.link, a.extra), a.model, "full cache",
                      "full", 0, length, a.link, commit_id)
        print(json.dumps(full), flush=True)
        for share in (float(x) for x in a.budgets.split(",")):
            budget = max(48, round(share * length))
            row = row_of(run(a.mpcache, a.model, prompt, a.policy, budget, a.tokens, a.link, a.extra), a.model,
                         "MPCache %d%%" % round(100 * share), a.policy, budget, length, a.link, commit_id)
            row["prefill_stage_share_bytes"] = row["prefill_bytes_max_party"] / full["prefill_bytes_max_party"] - 1
            row["prefill_stage_share_s"] = row["ttft_s"] / full["ttft_s"] - 1
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
