#!/usr/bin/env python3
"""Client retries and recovery (docs/serving.md, "Retries" and "Recovery"):
a server SIGKILLed mid-session, the three restarted as tools/deploy's units
would restart them (Restart=on-failure, RestartSec) while a stale peer keeps
connecting; clients with `--retries` get exactly `mpcache generate
--in-process`'s tokens, and the time from the kill to the first new
client request that succeeds is measured.

* A request the service refuses for good (too many tokens) is not retried.
* Each round: client A has streamed its first token when a server is
  killed. Its retry must say that tokens were already streamed, and its
  output must hold each token once (the retry's first tokens are checked,
  not printed). Client B starts right after the kill: it streamed nothing,
  so its retries (refused connections, "shutting down" from a survivor)
  are plain, and it gets its tokens once the service is back.
* The survivors lose their mesh and exit 1; a supervisor loop here
  restarts each server `--restart-s` (the unit's RestartSec) after it
  exited, plus a per-round delay that sets the start order. Round 1 kills
  server 2 (order: 2, then 0 and 1); round 2 kills server 0 and holds its
  restart 1 s longer (order: 1 and 2, then 0).
* A stale peer keeps connecting to servers 0 and 1's mesh ports with party
  2's hello (an old server 2 that never finishes its key exchange): each
  connection holds the acceptor until its 2 s key-exchange deadline, and it
  connects again as soon as it is dropped, before, during and after the
  restarts.
* Recovery is the kill to B's success; `--max-recovery-s` fails a slower
  round. One JSON line per round (`--json FILE`): the times from the kill.

    retry_test.py --mpcache BUILD/mpcache --model tools/model/fixture --work DIR
                  [--restart-s 5] [--max-recovery-s S] [--tokens-a 48] [--tokens-b 4] [--retries 100]
                  [--json FILE]
"""
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import fail, in_process_tokens, loopback_cluster, read, run, test_args, wait_for  # noqa: E402

PROMPTS = ["Emma Woodhouse, handsome, clever, and rich", "It is a truth universally acknowledged"]
# Per round: the server killed, and each server's restart delay beyond RestartSec.
ROUNDS = [(2, (0.0, 0.0, 0.0)), (0, (1.0, 0.0, 0.0))]


class StalePeer:
    """Connects to each mesh port as party 2 (the mesh hello, encrypted) and
    stays silent until dropped; then connects again. Counts its connections,
    and per server those it answered (the hello taken, the key exchange begun)."""

    def __init__(self, ports):
        self.stop = threading.Event()
        self.connections = 0
        self.answered = [0] * len(ports)
        self.threads = [threading.Thread(target=self.run, args=(port, to), daemon=True)
                        for to, port in enumerate(ports)]
        for t in self.threads:
            t.start()

    def run(self, port, to):
        hello = struct.pack("<IHBBII", 0x4843504D, 1, 1, 0, 2, to)  # magic "MPCH", version, encrypted, from 2, to
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
            except OSError:
                self.stop.wait(0.05)  # not listening: a restart under way, or the mesh formed
                continue
            with s:
                self.connections += 1
                try:
                    s.sendall(hello)
                    s.settimeout(0.1)
                    answered = False
                    while not self.stop.is_set():
                        try:
                            data = s.recv(4096)
                        except socket.timeout:
                            continue
                        if not data:
                            break
                        if not answered:
                            answered = True
                            self.answered[to] += 1
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join()


def rest_of(proc):
    """(stdout, stderr) to their ends, once `proc` has been read with
    readline(): through the same buffered readers, since communicate() reads
    the descriptors and would lose what readline() had buffered. stderr is
    read beside stdout, so neither pipe fills."""
    err = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    t.start()
    out = proc.stdout.read()
    t.join(timeout=900)
    proc.wait(timeout=900)
    return out, err[0] if err else ""


def main():
    def extra(ap):
        ap.add_argument("--restart-s", type=float, default=5.0, help="the unit's RestartSec")
        ap.add_argument("--max-recovery-s", type=float, help="fail a round slower than this")
        ap.add_argument("--tokens-a", type=int, default=48)
        ap.add_argument("--tokens-b", type=int, default=4)
        ap.add_argument("--json", help="one line per round")
        ap.add_argument("--retries", type=int, default=100, help="the clients' --retries (200 ms apart)")
    a = test_args(extra)
    retry = ["--retries", str(a.retries), "--retry-wait-ms", "200"]
    exe = a.mpcache
    t0 = time.monotonic()
    clients, _, config, ports = loopback_cluster(exe, a.work, ("alice",))
    key = os.path.join(clients, "alice.key")
    expected_a = in_process_tokens(exe, a.model, a.work, PROMPTS[:1], a.tokens_a)[PROMPTS[0]]
    expected_b = in_process_tokens(exe, a.model, a.work, PROMPTS[1:], a.tokens_b)[PROMPTS[1]]
    generation = [0]
    servers, logs, every_log = [None] * 3, [None] * 3, []

    def start(i):
        logs[i] = os.path.join(a.work, "gen%d-server%d.log" % (generation[0], i))
        every_log.append(logs[i])
        servers[i] = subprocess.Popen([exe, "serve", "--config", config, "--id", str(i), "--clients", clients,
                                       "--model", a.model, "--max-new-tokens", str(max(64, a.tokens_a))],
                                      stdout=subprocess.DEVNULL, stderr=open(logs[i], "w"))

    def client(prompt, tokens):
        return subprocess.Popen([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer",
                                 "none", "--prompt", prompt, "--tokens", str(tokens), "--ids", "--timeout-ms",
                                 "60000"] + retry, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def all_ready():
        return all(s.poll() is None and "ready: model shared" in read(l) for s, l in zip(servers, logs))

    # The first start: servers 0 and 1, then server 2 once the stale peer
    # has been taken for party 2 at both (so that it surely got in the way once).
    stale = StalePeer(ports[:2])
    for i in range(2):
        start(i)
    procs, rows = [], []
    try:
        wait_for("the stale peer to reach servers 0 and 1's key exchange", lambda: min(stale.answered) >= 1, 60, logs[:2])
        start(2)
        wait_for("the servers to share the model", all_ready, 900, logs)
        # Refused for good: not retried, whatever --retries says.
        r = run([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer", "none",
                 "--prompt", PROMPTS[0], "--tokens", str(max(64, a.tokens_a) + 1)] + retry)
        if r.returncode == 0 or "bad request: %d new tokens" % (max(64, a.tokens_a) + 1) not in r.stderr \
                or "retrying" in r.stderr:
            fail("a bad request was retried, or not refused: status %d\n%s" % (r.returncode, r.stderr), logs)
        print("a bad request is refused once, not retried")
        for round_no, (victim, delays) in enumerate(ROUNDS, 1):
            a_proc = client(PROMPTS[0], a.tokens_a)
            procs.append(a_proc)
            first = a_proc.stdout.readline()  # client A has streamed a token: mid-session
            if not first.strip():
                fail("round %d: client A chose no token: %s" % (round_no, a_proc.stderr.read()), logs)
            stale_before = stale.connections
            killed = time.monotonic()
            servers[victim].kill()
            b_proc = client(PROMPTS[1], a.tokens_b)
            procs.append(b_proc)
            generation[0] += 1
            old_logs = list(logs)
            # The supervisor: each server back restart_s (+ its delay) after it exited.
            exited, restarted, order, b_ok = [None] * 3, [None] * 3, [], None
            deadline = killed + 900
            while b_ok is None:
                now = time.monotonic()
                if now > deadline:
                    fail("round %d: no new client succeeded within 900 s of the kill" % round_no, old_logs + logs)
                for i in range(3):
                    if exited[i] is None and servers[i].poll() is not None:
                        exited[i] = now
                        if i != victim and servers[i].returncode != 1:
                            fail("round %d: survivor %d exited with status %d, expected 1" %
                                 (round_no, i, servers[i].returncode), old_logs)
                    if exited[i] is not None and restarted[i] is None and now >= exited[i] + a.restart_s + delays[i]:
                        start(i)
                        restarted[i] = now
                        order.append(i)
                if b_proc.poll() is not None:
                    if b_proc.returncode != 0:
                        fail("round %d: client B failed: %s" % (round_no, b_proc.stderr.read()), old_logs + logs)
                    b_ok = time.monotonic()
                time.sleep(0.02)
            out_b, err_b = b_proc.communicate()
            got_b = [int(x) for x in out_b.split()]
            if got_b != expected_b:
                fail("round %d: client B got %s, expected %s\n%s" % (round_no, got_b, expected_b, err_b), logs)
            out_a, err_a = rest_of(a_proc)
            got_a = [int(x) for x in (first + out_a).split()]
            if a_proc.returncode != 0 or got_a != expected_a:
                fail("round %d: client A: status %d, tokens %s, expected %s (each once)\n%s" %
                     (round_no, a_proc.returncode, got_a, expected_a, err_a), logs)
            for name, err in (("A", err_a), ("B", err_b)):
                if "retrying" not in err or "attempts, first token" not in err:
                    fail("round %d: client %s did not retry, or did not say so:\n%s" % (round_no, name, err), logs)
            if "tokens were already streamed" not in err_a:
                fail("round %d: client A's retry did not say that tokens were already streamed:\n%s"
                     % (round_no, err_a), logs)
            if "already streamed" in err_b:
                fail("round %d: client B streamed nothing before the kill, yet its retry says it did:\n%s"
                     % (round_no, err_b), logs)
            wait_for("round %d: the restarted servers to say they are ready" % round_no, all_ready, 60, logs)
            shared = max(float(l.split("ready: model shared in ")[1].split(" s")[0])
                         for l in (read(p) for p in logs))
            recovery = b_ok - killed
            row = {"round": round_no, "killed": victim, "restart_order": order, "restart_s": a.restart_s,
                   "survivors_out_s": round(max(exited[i] for i in range(3) if i != victim) - killed, 3),
                   "last_restart_s": round(max(restarted) - killed, 3), "model_shared_s": shared,
                   "recovery_s": round(recovery, 3), "stale_connections": stale.connections - stale_before,
                   "stale_answered": sum(stale.answered)}
            rows.append(row)
            print(json.dumps(row))
            if a.max_recovery_s is not None and recovery > a.max_recovery_s:
                fail("round %d: recovery took %.1f s, more than %.1f s" % (round_no, recovery, a.max_recovery_s), logs)
        # The stale peer got in the way: the servers dropped its connections, and it kept coming.
        if not any("dropped a connection" in read(l) for l in every_log):
            fail("no server logged dropping the stale peer's connections (%d made)" % stale.connections, every_log)
    finally:
        stale.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
        for s in servers:
            if s and s.poll() is None:
                s.kill()
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    print("retry test: rounds %s s from the kill to a new client's success (restart after %g s); %.1f s in all"
          % (", ".join("%.1f" % r["recovery_s"] for r in rows), a.restart_s, time.monotonic() - t0))


if __name__ == "__main__":
    main()
