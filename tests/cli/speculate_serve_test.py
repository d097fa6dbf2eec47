#!/usr/bin/env python3
"""Speculation against the service, as its users run it: three `mpcache
serve` processes on loopback and four `mpcache client` processes at once,
two of them speculating (`--speculate 4 --draft lookup`, `--speculate 3
--draft ngram:FILE`) and two not. Each must get exactly the tokens `mpcache
generate --in-process` gives its prompt (greedy, exact truncation). The
speculating ones must have verified drafts (their --json `accepted`), and
the servers must have run steps that held both kinds of session
(`--report`'s `mixed_steps`). Then a K out of range: a clear error, no
session; and a client under TOVA (its rows take turns per layer) drafting
with a public model folder (`model:DIR`, here the model itself): again
`generate --in-process`'s tokens.

    speculate_serve_test.py --mpcache BUILD/mpcache --model tools/model/fixture --work DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import (fail, in_process_tokens, loopback_cluster, read, run, start_cluster, terminate,  # noqa: E402
                        test_args, wait_stopped)

PROMPTS = [
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
    "Mr. Knightley, a sensible man about seven or eight-and-thirty",
    "It is a truth universally acknowledged, that a single man",
    "The real evils of Emma's situation were the power of having",
]
TOKENS = 12
# Public text for the n-gram drafter: the prompts' own words and some more.
PUBLIC_TEXT = " ".join(PROMPTS) * 3 + " and the power of having rather too much her own way, and a disposition"


def main():
    a = test_args()
    exe = a.mpcache
    clients, _, config, _ = loopback_cluster(exe, a.work, ("alice",))
    key = os.path.join(clients, "alice.key")
    public = os.path.join(a.work, "public.txt")
    with open(public, "w") as f:
        f.write(PUBLIC_TEXT)
    reports = [os.path.join(a.work, "server%d.json" % i) for i in range(3)]
    servers, logs = start_cluster(exe, config, clients, a.model, a.work, "server", ["--client-timeout-ms", "20000"],
                                  lambda i: ["--report", reports[i]])
    try:
        expected = in_process_tokens(exe, a.model, a.work, PROMPTS, TOKENS)
        speculation = [["--speculate", "4", "--draft", "lookup"], [], ["--speculate", "3", "--draft", "ngram:" + public], []]
        procs = []
        for i, p in enumerate(PROMPTS):
            out = os.path.join(a.work, "client%d.json" % i)
            procs.append((out, subprocess.Popen(
                [exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer", "none",
                 "--prompt", p, "--tokens", str(TOKENS), "--ids", "--json", out] + speculation[i],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for i, (p, (out, proc)) in enumerate(zip(PROMPTS, procs)):
            stdout, err = proc.communicate(timeout=600)
            got = [int(x) for x in stdout.split()]
            if proc.returncode != 0 or got != expected[p]:
                fail("client %d (%s) for %r: status %d, tokens %s, expected %s\n%s"
                     % (i, " ".join(speculation[i]) or "plain", p, proc.returncode, got, expected[p], err), logs)
            result = json.load(open(out))
            steps = result["accepted"]
            if speculation[i]:
                # Every token but the prefill's comes from a verified step.
                if not steps or sum(steps) + len(steps) != TOKENS - 1:
                    fail("client %d: verified steps %s do not account for its %d decoded tokens" % (i, steps, TOKENS - 1))
                print("client %d (%s): %d tokens in %d verified steps, accepted %s"
                      % (i, " ".join(speculation[i]), TOKENS, len(steps), steps))
            elif steps:
                fail("client %d did not speculate but reports verified steps %s" % (i, steps))
        print("4 concurrent clients, 2 speculating: tokens equal generate --in-process")

        r = run([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer", "none",
                 "--prompt", "Emma", "--tokens", "3", "--speculate", "17"])
        if r.returncode == 0 or "--speculate" not in r.stderr or "17" not in r.stderr:
            fail("--speculate 17 was not refused by name: status %d\n%s" % (r.returncode, r.stderr))
        print("K out of range: refused, naming why")
        tova = ["--policy", "tova"]
        expected_tova = in_process_tokens(exe, a.model, a.work, PROMPTS[:1], TOKENS, tova)[PROMPTS[0]]
        r = run([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer", "none",
                 "--prompt", PROMPTS[0], "--tokens", str(TOKENS), "--ids", "--speculate", "3",
                 "--draft", "model:" + a.model] + tova)
        got = [int(x) for x in r.stdout.split()]
        if r.returncode != 0 or got != expected_tova:
            fail("tova with a draft model: status %d, tokens %s, expected %s\n%s"
                 % (r.returncode, got, expected_tova, r.stderr), logs)
        print("tova, drafting with model:DIR: tokens equal generate --in-process --policy tova")
    finally:
        terminate(servers)
    wait_stopped(servers, logs)
    for i in range(3):
        report = json.load(open(reports[i]))
        if report.get("speculative_steps", 0) == 0 or report.get("mixed_steps", 0) == 0:
            fail("server %d ran no step with speculating and plain sessions together: %s" % (i, report), logs)
    for l in logs:
        if "stopped: 5 sessions done, 0 failed" not in read(l):
            fail("a server did not report 5 sessions done", logs)
    print("every server ran steps holding speculating and plain sessions, and stopped with status 0")


if __name__ == "__main__":
    main()
