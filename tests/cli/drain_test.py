#!/usr/bin/env python3
"""The coordinated drain (docs/serving.md, "Stopping"), as an operator meets
it: three `mpcache serve` processes with --drain-ms 60000 and
--max-sessions 2, three `mpcache client` processes at once (a 55-byte
prompt, 48 tokens), so two sessions run and one request queues.

Each phase is reached by a hook, not a guessed sleep: server 0 runs with
`--test-stop-at SESSION:STEP` and stops itself exactly as SIGTERM would when
that session is launched (in its prefill), has its first token, is in the
batched decode, or has its last step to run; the test then sends SIGTERM to
all three processes once server 0 logs that it drains. Every session
admitted must end with `generate --in-process`'s tokens; the queued request
is refused "shutting down" with no output; every server logs the drain
complete and "stopped".

Then a stop at server 2 alone (its hook, as SIGTERM would, at session 0's
token 10): the other two drain with it, the admitted clients still get
their tokens, the queued one is refused "shutting down"; server 2 exits 0,
servers 0 and 1 exit 1 (so that a supervisor restarts them and the mesh
re-forms).

    drain_test.py --mpcache BUILD/mpcache --model tools/model/fixture --work DIR
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import (fail, in_process_tokens, loopback_cluster, read, start_cluster, test_args,  # noqa: E402
                        wait_for_log)

PROMPTS = [
    "Emma Woodhouse, handsome, clever, and rich, with a comf",
    "Mr. Knightley, a sensible man about seven or eight-and-",
    "It is a truth universally acknowledged, that a single m",
]
TOKENS = 48
# Server 0's hook for each phase (SESSION:STEP; step -1: launched, before
# its prefill; step k: token k chosen, so k = TOKENS - 2 leaves the last step).
PHASES = [("in prefill", "1:-1"), ("at the first token", "0:0"), ("batched in decode", "0:10"),
          ("in its last step", "0:%d" % (TOKENS - 2))]


def main():
    a = test_args()
    exe = a.mpcache
    t0 = time.monotonic()
    clients, _, config, _ = loopback_cluster(exe, a.work, ("alice",))

    expected = in_process_tokens(exe, a.model, a.work, PROMPTS, TOKENS)

    def start(tag, extra):
        servers, logs = start_cluster(exe, config, clients, a.model, a.work, tag,
                                      ["--drain-ms", "60000", "--max-sessions", "2"], lambda i: extra[i])
        procs = [subprocess.Popen([exe, "client", "--servers", config, "--key", os.path.join(clients, "alice.key"),
                                   "--model", a.model, "--tokenizer", "none", "--prompt", p, "--tokens", str(TOKENS),
                                   "--ids", "--timeout-ms", "20000"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in PROMPTS]
        return servers, logs, procs

    def check_clients(what, procs, logs):
        """Every client: the exact tokens, or refused "shutting down" with no output. Returns (done, refused)."""
        done = refused = 0
        for p, proc in zip(PROMPTS, procs):
            out, err = proc.communicate(timeout=120)
            got = [int(x) for x in out.split()]
            if proc.returncode == 0 and got == expected[p]:
                done += 1
            elif proc.returncode != 0 and not got and "shutting down" in err:
                refused += 1
            else:
                fail("%s: a client (%r) neither got its tokens nor was refused 'shutting down' with no output: "
                     "status %d, tokens %s (expected %s)\n%s" % (what, p, proc.returncode, got, expected[p], err), logs)
        # Two sessions run at a time; the drain begins while both do, so the third request is refused.
        if done != 2 or refused != 1:
            fail("%s: %d clients got their tokens and %d were refused (expected 2 and 1)" % (what, done, refused), logs)

    def stopped(what, servers, logs, statuses):
        for i, s in enumerate(servers):
            try:
                status = s.wait(timeout=90)
            except subprocess.TimeoutExpired:
                s.kill()
                fail("%s: server %d did not stop within 90 s" % (what, i), logs)
            if status not in statuses[i]:
                fail("%s: server %d stopped with status %d (expected %s)" % (what, i, status, statuses[i]), logs)
        if "drain complete: every session admitted has ended at all three servers" not in read(logs[0]):
            fail("%s: server 0 did not log the drain complete" % what, logs)
        for l in logs:
            if "stopped: 2 sessions done, 0 failed" not in read(l):
                fail("%s: %s did not report 2 sessions done, 0 failed" % (what, os.path.basename(l)), logs)

    for phase, at in PHASES:
        t = time.monotonic()
        tag = "phase%d-" % PHASES.index((phase, at))
        servers, logs, procs = start(tag, [["--test-stop-at", at], [], []])
        try:
            wait_for_log(logs[0], "test: a stop as if asked here, at session %s step %s" % tuple(at.split(":")), 120,
                         logs)
            wait_for_log(logs[0], "draining (server 0 was asked to stop)", 30, logs)
            for s in servers:  # the operator's SIGTERM reaches an already draining service
                if s.poll() is None:
                    s.send_signal(signal.SIGTERM)
            check_clients("SIGTERM " + phase, procs, logs)
            # Server 0 was asked (its hook); 1 and 2 exit 0 if their SIGTERM came before the drain ended, else 1.
            stopped("SIGTERM " + phase, servers, logs, [(0,), (0, 1), (0, 1)])
        finally:
            for s in servers + procs:
                if s.poll() is None:
                    s.kill()
        print("SIGTERM %s: 2 sessions ended with generate's tokens, the queued request refused 'shutting down' "
              "(%.1f s)" % (phase, time.monotonic() - t))

    # Server 2 alone is stopped (its hook: as SIGTERM, in session 0's decode).
    t = time.monotonic()
    servers, logs, procs = start("one-", [[], [], ["--test-stop-at", "0:10"]])
    try:
        wait_for_log(logs[0], "server 2 was asked to stop: the service drains", 120, logs)
        check_clients("a stop at server 2 alone", procs, logs)
        stopped("a stop at server 2 alone", servers, logs, [(1,), (1,), (0,)])
        for l in logs[:2]:
            if "the service drained because server 2 was asked to stop; exiting with status 1" not in read(l):
                fail("%s did not say why it exits 1" % os.path.basename(l), logs)
    finally:
        for s in servers + procs:
            if s.poll() is None:
                s.kill()
    print("SIGTERM to server 2 alone: the service drains, admitted clients get their tokens, the queued one is "
          "refused; server 2 exits 0, servers 0 and 1 exit 1 to be restarted (%.1f s)" % (time.monotonic() - t))
    print("drain test: %.1f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
