#!/usr/bin/env python3
"""A supervisor's view of the servers (docs/serving.md, "Readiness"): each
server says READY=1 on $NOTIFY_SOCKET (systemd's notify protocol, as
`Type=notify` units get it) once the model is shared, and STOPPING=1 when
it stops; a request that arrives after SIGTERM is refused "shutting down"
with no output.

Each server gets a unix datagram socket of its own (servers 0 and 1 a
path, server 2 an abstract name, "@..."), bound by this test.

The drain is held open by a session whose client never sends its prompt
(--fault stall): it ends when the servers drop that client
(--client-timeout-ms 4000), so the request sent meanwhile meets a drain
in progress, reached by polling server 0's log, not by a guessed sleep.

    ready_test.py --mpcache BUILD/mpcache --model tools/model/fixture --work DIR
"""
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_test import fail, loopback_cluster, read, run, test_args, wait_for_log  # noqa: E402


def main():
    a = test_args()
    exe = a.mpcache
    t0 = time.monotonic()
    clients, _, config, _ = loopback_cluster(exe, a.work, ("alice",))
    key = os.path.join(clients, "alice.key")

    names = [os.path.join(a.work, "notify0"), os.path.join(a.work, "notify1"), "@mpcache-ready-test-%d" % os.getpid()]
    notify = []
    for name in names:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind("\0" + name[1:] if name.startswith("@") else name)
        s.settimeout(120)
        notify.append(s)

    logs = [os.path.join(a.work, "server%d.log" % i) for i in range(3)]
    servers = [subprocess.Popen([exe, "serve", "--config", config, "--id", str(i), "--clients", clients,
                                 "--model", a.model, "--drain-ms", "60000", "--client-timeout-ms", "4000"],
                                stdout=subprocess.DEVNULL, stderr=open(logs[i], "w"),
                                env=dict(os.environ, NOTIFY_SOCKET=names[i]))
               for i in range(3)]
    staller = None
    try:
        for i in range(3):
            try:
                said = notify[i].recv(4096).decode()
            except socket.timeout:
                fail("server %d said nothing on NOTIFY_SOCKET within 120 s" % i, logs)
            if said.split("\n")[0] != "READY=1":
                fail("server %d's first word to its supervisor is %r, not READY=1" % (i, said), logs)
            # The log line comes first: READY=1 means the model is shared.
            if "ready: model shared" not in read(logs[i]):
                fail("server %d said READY=1 before it logged the model shared" % i, logs)
        print("each server said READY=1 on NOTIFY_SOCKET once the model was shared (paths and an abstract name)")

        staller = subprocess.Popen([exe, "client", "--servers", config, "--key", key, "--model", a.model,
                                    "--tokenizer", "none", "--prompt", "Emma", "--tokens", "4", "--fault", "stall",
                                    "--timeout-ms", "30000"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_log(logs[0], "session 0 for", 60, logs)
        for s in servers:
            s.send_signal(signal.SIGTERM)
        wait_for_log(logs[0], "draining (server", 30, logs)
        r = run([exe, "client", "--servers", config, "--key", key, "--model", a.model, "--tokenizer", "none",
                 "--prompt", "It is a truth", "--tokens", "4", "--ids", "--timeout-ms", "10000"])
        if r.returncode == 0 or r.stdout.strip() or "shutting down" not in r.stderr:
            fail("a request after SIGTERM was not refused 'shutting down' with no output: status %d, out %r\n%s"
                 % (r.returncode, r.stdout, r.stderr), logs)
        if "drain complete" in read(logs[0]):
            fail("the drain ended before the request came: the test reached no drain in progress", logs)
        print("a request after SIGTERM, during the drain: refused 'shutting down', no output")
        staller.communicate(timeout=60)
        for i, s in enumerate(servers):
            try:
                status = s.wait(timeout=60)
            except subprocess.TimeoutExpired:
                fail("server %d did not stop within 60 s of SIGTERM" % i, logs)
            if status != 0:
                fail("server %d stopped with status %d" % (i, status), logs)
            said = notify[i].recv(4096).decode()
            if "STOPPING=1" not in said:
                fail("server %d's last word to its supervisor is %r, not STOPPING=1" % (i, said), logs)
        print("SIGTERM: each server drained, said STOPPING=1 and exited 0")
    finally:
        for p in servers + ([staller] if staller else []):
            if p.poll() is None:
                p.kill()
        for s in notify:
            s.close()
    print("ready test: %.1f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
