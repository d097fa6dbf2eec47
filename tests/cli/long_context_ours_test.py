#!/usr/bin/python3
"""bench/long_context_ours.py end to end on the fixture model: a real prefill
over three processes per arm, and rows that say what the preset promises."""
import argparse
import json
import os
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--mpcache", required=True)
ap.add_argument("--model", required=True)
ap.add_argument("--work", required=True)
a = ap.parse_args()
os.makedirs(a.work, exist_ok=True)
text = os.path.join(a.work, "text.txt")
with open(text, "w") as f:
    f.write("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be "
            "in want of a wife. However little known the feelings or views of such a man may be.")
script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "long_context_ours.py")
done = subprocess.run([sys.executable, script, "--mpcache", a.mpcache, "--model", a.model, "--text", text,
                       "--lengths", "100", "--budgets", "0.5", "--tokens", "3", "--link", "none"],
                      capture_output=True, text=True, timeout=600)
sys.stderr.write(done.stderr[-2000:])
assert done.returncode == 0, "long_context_ours.py exited %d" % done.returncode
rows = [json.loads(l) for l in done.stdout.splitlines() if l.strip()]
assert [r["arm"] for r in rows] == ["full cache", "MPCache 50%"], [r["arm"] for r in rows]
full, mpcache = rows
assert full["budget_tokens"] == 100 and mpcache["budget_tokens"] == 50, (full["budget_tokens"], mpcache["budget_tokens"])
for r in rows:
    assert r["prompt_bytes"] == 100 and r["decode_steps"] == 2 and r["cache"] == "prefill", r
    assert r["prefill_rounds"] > 0 and r["prefill_bytes_max_party"] > 0 and r["token_rounds"] > 0, r
    assert len(r["peak_rss_bytes"]) == 3 and min(r["peak_rss_bytes"]) > 0, r
    assert r["prefill_model_wan_s"] > r["prefill_model_lan_s"] > 0, r
# MPCache's prefill-stage work (the clusters' summaries) costs bytes beyond
# the full cache's prefill of the same prompt, and the share is reported.
assert 0 < mpcache["prefill_stage_share_bytes"] < 1, mpcache["prefill_stage_share_bytes"]
print("OK: %d rows, prefill-stage share %.3f" % (len(rows), mpcache["prefill_stage_share_bytes"]))
