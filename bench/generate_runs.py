"""What the bench scripts share: run `mpcache generate` (the local launcher,
three party processes) with --json and read its rows, and name the commit.

Used by long_context_ours.py and real_models.py (imported from beside them).
"""
import json
import os
import subprocess
import sys
import tempfile


def commit():
    """This checkout's short HEAD, kept in every row."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def run_generate(command, what):
    """Runs `command` (an `mpcache generate` command line, perhaps behind
    prlimit) with --json added; returns its summary row and its party rows
    in party order. A failed run ends the script naming `what`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.jsonl")
        command = command + ["--json", out]
        sys.stderr.write(" ".join(command) + "\n")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
            raise SystemExit("%s: mpcache generate exited %d" % (what, done.returncode))
        lines = [json.loads(l) for l in open(out) if l.strip()]
    summary = next(l for l in lines if l.get("row") == "summary")
    parties = sorted((l for l in lines if l.get("row") == "party"), key=lambda p: p["party"])
    return summary, parties
