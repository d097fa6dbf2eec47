#!/usr/bin/python3
"""Plot `mpcache-bench --preset fidelity` JSON lines as one SVG (no dependencies).

usage: tools/plot_fidelity.py fidelity.jsonl fidelity.svg

One panel per (metric, context) for ppl, passkey_acc and recall: x = budget
(fraction of the context), one line per policy; the full cache is a dashed
horizontal reference line.
"""
import json
import sys
from collections import defaultdict

COLORS = {"mpcache": "#d62728", "streaming_llm": "#1f77b4", "h2o": "#2ca02c", "tova": "#9467bd",
          "snapkv": "#8c564b", "infllm": "#17becf", "longcache": "#e377c2", "quest": "#ff7f0e", "full": "#000000"}
METRICS = [("ppl", "perplexity / byte (lower is better)"), ("passkey_acc", "passkey accuracy"),
           ("recall", "top-k recall (ArkVale)")]


def main(src, dst):
    rows = [json.loads(line) for line in open(src) if line.strip().startswith("{")]
    rows = [r for r in rows if r.get("preset") == "fidelity" and r["value"] == r["value"]]  # drop NaN
    contexts = sorted({r["context"] for r in rows})
    data = defaultdict(lambda: defaultdict(list))  # (metric, ctx) -> policy -> [(budget, value)]
    for r in rows:
        data[(r["metric"], r["context"])][r["policy"]].append((r["budget"], r["value"]))
    pw, ph, ml, mt = 360, 240, 60, 40
    width, height = ml + len(METRICS) * (pw + ml), mt + len(contexts) * (ph + 2 * mt) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for ci, ctx in enumerate(contexts):
        for mi, (metric, title) in enumerate(METRICS):
            x0, y0 = ml + mi * (pw + ml), mt + ci * (ph + 2 * mt)
            series = data[(metric, ctx)]
            pts = [v for pol in series.values() for _, v in pol]
            if not pts:
                continue
            budgets = sorted({b for pol, s in series.items() if pol != "full" for b, _ in s}) or [1.0]
            lo, hi = min(pts), max(pts)
            if hi - lo < 1e-9:
                lo, hi = lo - 0.5, hi + 0.5
            pad = (hi - lo) * 0.08
            lo, hi = lo - pad, hi + pad
            bx = lambda b: x0 + (budgets.index(b) + 0.5) * pw / len(budgets)
            vy = lambda v: y0 + ph - (v - lo) / (hi - lo) * ph
            out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
            out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 8}" text-anchor="middle" font-weight="bold">{title}, context {ctx}</text>')
            for k in range(5):
                v = lo + (hi - lo) * k / 4
                out.append(f'<text x="{x0 - 4}" y="{vy(v) + 4}" text-anchor="end">{v:.3g}</text>')
            for b in budgets:
                out.append(f'<text x="{bx(b)}" y="{y0 + ph + 14}" text-anchor="middle">{b * 100:g}%</text>')
            for pol, s in sorted(series.items()):
                color = COLORS.get(pol, "#444")
                if pol == "full":
                    v = s[0][1]
                    out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{vy(v)}" y2="{vy(v)}" stroke="black" stroke-dasharray="4 3"/>')
                    continue
                s = sorted(p for p in s if p[0] in budgets)
                path = " ".join(f"{bx(b):.1f},{vy(v):.1f}" for b, v in s)
                out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
                for b, v in s:
                    out.append(f'<circle cx="{bx(b):.1f}" cy="{vy(v):.1f}" r="3" fill="{color}"/>')
    lx = ml
    for pol, color in COLORS.items():
        dash = ' stroke-dasharray="4 3"' if pol == "full" else ""
        out.append(f'<line x1="{lx}" x2="{lx + 20}" y1="{height - 20}" y2="{height - 20}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 24}" y="{height - 16}">{pol}</text>')
        lx += 110
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
