#!/usr/bin/env python3
"""Add MPCache's prefill-stage share to `mpcache-bench --preset long-context
--real-prefill` rows (JSON lines on stdin or in the files named), and say
when and from what they were measured.

Usage: bench/prefill_stage_share.py --commit C --date D --build B ROWS.jsonl... > OUT.jsonl

With a real prefill (the rows' "cache":"prefill") MPCache's prefill-stage
work, the prompt's cluster summaries (and static eviction, off in our
defaults), runs inside the prefill row. Its messages carry the tags
`summary` and `eviction` (the decoder's policy_prefill), so an MPCache
prefill row gets:
  * prefill_stage_bytes, _rounds: those tags' bytes (the busiest party's)
    and rounds (charged to them on the critical path, the median party's);
  * prefill_stage_s: those tags' seconds (the time up to their rounds),
    read back from the breakdown: model_s = rounds x 0.3 ms + bytes /
    377 MB/s + seconds / 3;
  * prefill_stage_of_prefill_bytes, _s: those bytes over the row's
    bytes_per_party, those seconds over the seconds of all its tags (the
    share of this prefill);
  * prefill_stage_share_bytes, _s, _rounds: the row's bytes and latency_s
    against the full cache's prefill of the same length and layers,
    (mpcache - full) / full, and its rounds minus the full cache's: what
    the prefill-stage work adds (as in long-context-ours.jsonl).
Every row also gets "commit", "date" and "build". Other fields are the
bench's, unchanged.
"""
import argparse
import fileinput
import json

LAN_RTT_S, LAN_BYTES_PER_S = 0.3e-3, 377e6  # the bench's lan_link()
STAGE_TAGS = ("summary", "eviction")


def tag_seconds(t):
    return 3 * (t["model_s"] - t["rounds"] * LAN_RTT_S - t["bytes"] / LAN_BYTES_PER_S)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commit", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    rows = [json.loads(line) for line in fileinput.input(a.files) if line.strip()]
    full = {(r["length"], r["layers"]): r for r in rows if r["phase"] == "prefill" and r["policy"] == "full"}
    for r in rows:
        r.update({"commit": a.commit, "date": a.date, "build": a.build})
        if r["phase"] != "prefill" or r["policy"] != "mpcache":
            continue
        b = r["breakdown"]
        stage = [b[t] for t in STAGE_TAGS if t in b]
        stage_s = sum(tag_seconds(t) for t in stage)
        all_s = sum(tag_seconds(t) for t in b.values())
        r["prefill_stage_bytes"] = sum(t["bytes"] for t in stage)
        r["prefill_stage_rounds"] = sum(t["rounds"] for t in stage)
        r["prefill_stage_s"] = stage_s
        r["prefill_stage_of_prefill_bytes"] = r["prefill_stage_bytes"] / r["bytes_per_party"]
        r["prefill_stage_of_prefill_s"] = stage_s / all_s
        f = full.get((r["length"], r["layers"]))
        if f:
            r["prefill_stage_share_bytes"] = r["bytes_per_party"] / f["bytes_per_party"] - 1
            r["prefill_stage_share_s"] = r["latency_s"] / f["latency_s"] - 1
            r["prefill_stage_share_rounds"] = r["rounds"] - f["rounds"]
    for r in rows:
        print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    main()
