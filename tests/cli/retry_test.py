#!/usr/bin/env python3
"""Client retries (docs/serving.md, "Retries"): a server killed mid-session,
then the three restarted as a supervisor would; clients with `--retries`
get exactly `mpcache generate --in-process`'s tokens.

* Client A has streamed its first token when server 2 is killed. Its retry
  must say that tokens were already streamed, and its output must hold
  each token once (the retry's first tokens are checked, not printed).
* Client B starts after the kill, before the restart: it streamed nothing,
  so its retries (refused connections, "shutting down" from a survivor)
  are plain, and it gets its tokens once the service is back.
* A request the service refuses for good (too many tokens) is not retried.

    retry_test.py --mpcache BUILD/mpcache --model tools/model/fixture --work DIR
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import fail, in_process_tokens, loopback_cluster, read, run, test_args, wait_for  # noqa: E402

PROMPTS = ["Emma Woodhouse, handsome, clever, and rich", "It is a truth universally acknowledged"]
TOKENS = 48
RETRY = ["--retries", "100", "--retry-wait-ms", "200"]


def main():
    a = test_args()
    exe = a.mpcache
    t0 = time.monotonic()
    clients, _, config, _ = loopback_cluster(exe, a.work, ("alice",))
    key = os.path.join(clients, "alice.key")

    by_prompt = in_process_tokens(exe, a.model, a.work, PROMPTS, TOKENS)
    expected = [by_prompt[p] for p in PROMPTS]

    def start(tag, order=(0, 1, 2)):
        """The three servers, started in `order`, as their units would run them."""
        logs = [os.path.join(a.work, "%s%d.log" % (tag, i)) for i in range(3)]
        servers = [None] * 3
        for i in order:
            servers[i] = subprocess.Popen([exe, "serve", "--config", config, "--id", str(i), "--clients", clients,
                                           "--model", a.model, "--max-new-tokens", "64"],
                                          stdout=subprocess.DEVNULL, stderr=open(logs[i], "w"))
        return servers, logs

    def client(prompt, extra=()):
        return subprocess.Popen([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer",
                                 "none", "--prompt", prompt, "--tokens", str(TOKENS), "--ids", "--timeout-ms", "20000"]
                                + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    servers, logs = start("first-")
    procs = []
    try:
        wait_for("the servers to share the model", lambda: all("ready: model shared" in read(l) for l in logs), 120,
                 logs)
        # Refused for good: not retried, whatever --retries says.
        r = run([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer", "none",
                 "--prompt", PROMPTS[0], "--tokens", "100"] + RETRY)
        if r.returncode == 0 or "bad request: 100 new tokens" not in r.stderr or "retrying" in r.stderr:
            fail("a bad request was retried, or not refused: status %d\n%s" % (r.returncode, r.stderr), logs)
        print("a bad request is refused once, not retried")

        a_proc = client(PROMPTS[0], RETRY)
        procs.append(a_proc)
        first = a_proc.stdout.readline()  # client A has streamed a token
        if not first.strip():
            fail("client A chose no token: " + a_proc.stderr.read(), logs)
        killed = time.monotonic()
        servers[2].kill()
        b_proc = client(PROMPTS[1], RETRY)
        procs.append(b_proc)
        # The survivors lose their mesh and exit 1, for their supervisor to restart them.
        for i in (0, 1):
            try:
                status = servers[i].wait(timeout=60)
            except subprocess.TimeoutExpired:
                fail("survivor %d did not exit within 60 s of server 2's death" % i, logs)
            if status != 1:
                fail("survivor %d exited with status %d, expected 1" % (i, status), logs)
        servers[2].wait()
        # Restarted in another order (2, 0, 1): the mesh forms whoever comes first.
        servers, logs = start("second-", order=(2, 0, 1))
        outs = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
        outs[0] = (first + outs[0][0],) + outs[0][1:]  # client A's first token, read before the kill
        recovered = time.monotonic() - killed
        for name, (out, err, status), want in zip("AB", outs, expected):
            got = [int(x) for x in out.split()]
            if status != 0 or got != want:
                fail("client %s: status %d, tokens %s, expected %s (each once)\n%s" % (name, status, got, want, err),
                     logs)
            if "retrying" not in err or "attempts, first token" not in err:
                fail("client %s did not retry, or did not say so:\n%s" % (name, err), logs)
        if "tokens were already streamed" not in outs[0][1]:
            fail("client A's retry did not say that tokens were already streamed:\n" + outs[0][1], logs)
        if "already streamed" in outs[1][1]:
            fail("client B streamed nothing before the kill, yet its retry says it did:\n" + outs[1][1], logs)
        print("server 2 killed mid-session, the three restarted: both retrying clients got generate's tokens, each "
              "once (A had streamed a token and said so), %.1f s after the kill" % recovered)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for s in servers:
            if s and s.poll() is None:
                s.kill()
    print("retry test: %.1f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
