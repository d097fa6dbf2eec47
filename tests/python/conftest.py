"""Fixtures of the Python package's tests (ctest python_package runs them
with /usr/bin/python3 -m pytest). The build tells them where things are:
MPCACHE_CLI (the mpcache executable), MPCACHE_SOURCE (the source tree) and
PYTHONPATH (the build's python/ folder, which holds the package)."""
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

SOURCE = os.environ.get("MPCACHE_SOURCE", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CLI = os.environ.get("MPCACHE_CLI", "")
FIXTURE_MODEL = os.path.join(SOURCE, "tools", "model", "fixture")  # 2 layers, byte tokens (no tokenizer files)


def wait_for(what, holds, timeout, gone=lambda: None):
    """Polls holds() until true; fails naming `what` after `timeout` s, or at
    once when gone() names why it never will be."""
    deadline = time.monotonic() + timeout
    while True:
        value = holds()
        if value:
            return value
        why = gone()
        if why:
            pytest.fail("%s: %s" % (what, why))
        if time.monotonic() > deadline:
            pytest.fail("%s: not within %g s" % (what, timeout))
        time.sleep(0.05)


class LocalService:
    """`mpcache serve --local` started from the build tree; its printed
    client command, parsed."""

    def __init__(self, model, extra=()):
        if not CLI:
            pytest.skip("MPCACHE_CLI is not set (run through ctest)")
        model_args = ["--model", model] if model else []  # None: the bundled model, serve's default
        self.proc = subprocess.Popen([CLI, "serve", "--local"] + model_args + list(extra),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines = []
        self.client_command = None
        self.gateway_command = None
        deadline = time.monotonic() + 300
        while self.gateway_command is None:
            line = self.proc.stdout.readline()  # the service prints, or ends (EOF)
            if not line:
                err = self.proc.stderr.read()
                self.proc.wait(timeout=30)
                pytest.fail("serve --local ended (status %s) before it printed its commands: %s" %
                            (self.proc.returncode, err[-3000:]))
            self.lines.append(line)
            if line.strip().startswith("client:"):
                self.client_command = shlex.split(line.split("client:", 1)[1])
            if line.strip().startswith("gateway:"):
                self.gateway_command = shlex.split(line.split("gateway:", 1)[1])
            if time.monotonic() > deadline:
                pytest.fail("serve --local printed no commands within 300 s")
        args = self.client_command
        self.servers = args[args.index("--servers") + 1]
        self.key = args[args.index("--key") + 1]
        self.folder = os.path.dirname(self.servers)

    def log(self, i):
        with open(os.path.join(self.folder, "server%d.log" % i)) as f:
            return f.read()

    def stop(self, sig=signal.SIGINT, timeout=60):
        """Stops it as Ctrl-C does; its exit status and the rest of its output."""
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, "".join(self.lines) + out, err


@pytest.fixture(scope="session")
def service():
    s = LocalService(FIXTURE_MODEL)
    yield s
    if s.proc.poll() is None:
        s.stop()
