#!/usr/bin/python3
"""Plot a serve-soak result (mpcache-bench --preset serve-soak --json): each
server's RSS, open descriptors and mesh streams over time, one panel each,
with the bursts' idle checks marked and, on the RSS panel, a band of +-5%
around each server's median after the warm-up.

Needs matplotlib (Debian's python3-matplotlib).
Usage: /usr/bin/python3 bench/plot_soak.py RESULT.jsonl OUT.svg [--warmup-s 600]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("out")
    ap.add_argument("--warmup-s", type=float, default=600)
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.result) if line.strip()]
    samples = [r for r in rows if r.get("row") == "sample"]
    idle = [r for r in rows if r.get("row") == "idle"]
    servers = sorted({r["server"] for r in samples})
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    panels = [("rss_kb", "RSS (MB)", 1 / 1024), ("fds", "open descriptors", 1), ("mesh_streams", "mesh streams", 1)]
    for ax, (field, label, scale) in zip(axes, panels):
        for s in servers:
            mine = [r for r in samples if r["server"] == s and r.get(field, -1) >= 0]
            ax.plot([r["t_s"] / 60 for r in mine], [r[field] * scale for r in mine], label="server %d" % s,
                    linewidth=0.8)
            if field == "rss_kb":
                late = sorted(r[field] * scale for r in mine if r["t_s"] >= a.warmup_s)
                if late:
                    median = late[len(late) // 2]
                    ax.axhspan(median * 0.95, median * 1.05, alpha=0.08, color="C%d" % s)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.axvline(a.warmup_s / 60, color="grey", linestyle="--", linewidth=0.8)
    for r in idle:  # each burst's idle check, on the descriptor and stream panels
        for ax in axes[1:]:
            ax.axvline(r["t_s"] / 60, color="green" if r.get("back_to_idle") else "red", alpha=0.08, linewidth=0.6)
    axes[0].legend(loc="lower right")
    axes[0].set_title("serve-soak: %s (bands: +-5%% of the median after %g min; dashed: warm-up's end; "
                      "green: a burst's idle check)" % (a.result.split("/")[-1], a.warmup_s / 60), fontsize=9)
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(a.out, metadata={"Date": None} if a.out.endswith(".svg") else None)


if __name__ == "__main__":
    main()
