#!/usr/bin/env python3
"""Run every command in the README's shell blocks (ctest `readme_commands`).

    readme_commands.py --readme README.md --cli BUILD/tools/mpcache [--work DIR]
                       [--timeout S] [--dry-run]

Every line of a fenced block marked sh, bash, shell or console is a command
(a trailing backslash continues it; "# ..." is a comment; a console block's
"$ " prompt is dropped). Each command is run, or skipped for a stated
reason; a command this script does not know fails the test, so that no
README command goes unchecked by accident.

  * `./tools/run ARGS`: tools/run sets the machine up, builds the `release`
    preset and runs `build/release/tools/mpcache generate ARGS`. A test runs
    inside a build that already exists, so it runs `CLI generate ARGS` with
    the binary of this build (--cli; the dev build under ctest): the same
    program, built with other flags.
  * `mpcache ARGS` or `.../tools/mpcache ARGS`: `CLI ARGS`.
  * `./tools/test ...`: skipped. CI (.ci/run) runs it itself, and it would
    run this test again.
  * `tools/setup.sh` and `cmake` (configure, build): skipped. This test runs
    inside a build that ./tools/test (which runs both) made.
  * a command with `--config`: skipped. It is one party of a cluster and
    needs the other parties' hosts (docs/deployment.md has a recipe that
    ctest `generate_netns` runs).
  * `mpcache serve --local`: started in the background; the commands after
    it run against it, with its folder in place of the README's
    /tmp/mpcache-local-XXXXXX, and they must be the ones it printed. It is
    stopped by SIGINT (Ctrl-C) at the end and must exit 0.
  * `mpcache gateway ...`: started in the background on a free port (for
    the README's --listen), must say it listens, then stopped.
  * a `--model` under ~/models/: skipped. A model the reader downloaded;
    none can be downloaded here (tests/models run the same architectures).

Commands run one after another in --work (emptied first), with the time
bound --timeout each. The test fails naming the first command that fails,
with the end of its output. Pipes, redirections and `&&` are not supported:
keep README commands single programs.
"""
import argparse
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

SHELL_LANGS = {"sh", "bash", "shell", "console"}


def commands(readme_text):
    """(line number, command text, argv) for every command in the shell blocks."""
    out = []
    lang = None  # None: outside a block
    pending, start = "", 0
    for n, raw in enumerate(readme_text.splitlines(), 1):
        fence = re.match(r"^\s*```+\s*([\w+-]*)", raw)
        if fence:
            if lang is None:
                lang = fence.group(1).lower()
            else:
                lang = None
            pending = ""
            continue
        if lang not in SHELL_LANGS:
            continue
        line = raw.rstrip()
        if lang == "console":
            if not pending and not line.lstrip().startswith("$ "):
                continue  # output, not a command
            if not pending:
                line = line.lstrip()[2:]
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        argv = shlex.split(text, comments=True)
        if argv:
            out.append((start, text.split(" #")[0].strip() if " #" in text else text, argv))
    return out


def plan(argv, cli):
    """(command to run, None) or (None, why it is skipped). Raises ValueError when unknown."""
    for token in argv:
        if token in ("|", "||", "&&", ";", "&", ">", ">>", "<") or token.startswith((">", "<", "2>")):
            raise ValueError("pipes, redirections and command lists are not supported ({!r})".format(token))
    prog, args = argv[0], argv[1:]
    if prog in ("./tools/test", "tools/test"):
        return None, "CI runs ./tools/test itself (.ci/run); inside ctest it would run this test again"
    if prog in ("tools/setup.sh", "./tools/setup.sh"):
        return None, "installs packages (as root); ./tools/test and ./tools/run run it first"
    if prog in (".tools/bin/cmake", "cmake"):
        return None, "a configure or build: this test runs inside the build ./tools/test made"
    if "--config" in args:
        return None, "one party of a cluster: it needs the other parties' hosts (docs/deployment.md)"
    if "--model" in args and args[args.index("--model") + 1].startswith("~/models/"):
        return None, "a model the reader downloaded: none can be downloaded here"
    if prog in ("./tools/run", "tools/run"):
        # tools/run = setup + release build + `build/release/tools/mpcache generate ARGS`;
        # here: the same program from this build.
        return [cli, "generate"] + args, None
    if prog == "mpcache" or prog.endswith("/tools/mpcache"):
        return [cli] + args, None
    raise ValueError("no rule for '{}': teach tests/docs/readme_commands.py how to run or why to skip it".format(prog))


def tail(text, lines=30):
    rows = text.splitlines()
    return "\n".join(rows[-lines:])


def run(cmd, work, timeout):
    """(exit status or None on timeout, output)."""
    proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        # The launcher passes SIGTERM on to its party processes; then make sure.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return None, out.decode("utf-8", "replace")


PLACEHOLDER = "/tmp/mpcache-local-XXXXXX"


class Background:
    """A command that keeps running (serve --local, gateway): started, read
    until a line holding `ready`, stopped by stop()."""

    def __init__(self, cmd, work, ready, timeout):
        self.proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        self.lines = []
        self.queue = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop(signal.SIGKILL, 10)
                raise RuntimeError("printed no {!r} within {:.0f} s".format(ready, timeout))
            if line is None:
                raise RuntimeError("ended before it printed {!r}: {}".format(ready, "".join(self.lines)[-3000:]))
            self.lines.append(line)
            if ready in line:
                return

    def read(self):
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def stop(self, sig=signal.SIGINT, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        rest = []
        while True:  # the reader thread's lines, to the end of the output
            line = self.queue.get(timeout=10)
            if line is None:
                break
            rest.append(line)
        return self.proc.returncode, "".join(self.lines + rest)


def printed_command(lines, label):
    """The command after `label:` in serve --local's output."""
    for line in lines:
        if line.strip().startswith(label + ":"):
            return shlex.split(line.split(label + ":", 1)[1])
    raise RuntimeError("serve --local printed no {} command".format(label))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", required=True)
    ap.add_argument("--cli", required=True, help="the mpcache executable of this build")
    ap.add_argument("--work", default=None, help="working folder of the commands (emptied first)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds each command may take")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = ap.parse_args(argv)

    with open(args.readme, encoding="utf-8") as f:
        found = commands(f.read())
    if not found:
        print("readme_commands: FAILED: no command in the shell blocks of " + args.readme)
        return 1
    cli = os.path.abspath(args.cli)
    work = os.path.abspath(args.work or "readme_commands.work")
    if not args.dry_run:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    services = []  # serve --local, while it runs
    try:
        status = run_commands(found, args, cli, work, services)
    finally:
        for service in services:
            code, out = service.stop()
            if code != 0:
                print(tail(out))
                print("readme_commands: FAILED: serve --local exited with {} after Ctrl-C".format(code))
                status = 1
    return status


def run_commands(found, args, cli, work, services):
    ran = skipped = 0
    for line, text, tokens in found:
        where = "{}:{}".format(os.path.basename(args.readme), line)
        try:
            cmd, why = plan(tokens, cli)
        except ValueError as e:
            print("readme_commands: FAILED: `{}` ({}): {}".format(text, where, e))
            return 1
        if cmd is None:
            print("skip `{}` ({}): {}".format(text, where, why))
            skipped += 1
            continue
        if services and any(PLACEHOLDER in c for c in cmd):
            cmd = [c.replace(PLACEHOLDER, services[0].folder) for c in cmd]
        print("run  `{}` ({}) as: {}".format(text, where, " ".join(shlex.quote(c) for c in cmd)), flush=True)
        if args.dry_run:
            ran += 1
            continue
        try:
            if cmd[1:3] == ["serve", "--local"]:
                service = Background(cmd, work, "Ctrl-C stops", args.timeout)
                services.append(service)
                service.client = printed_command(service.lines, "client")
                service.gateway = printed_command(service.lines, "gateway")
                service.folder = os.path.dirname(service.client[service.client.index("--servers") + 1])
                ran += 1
                continue
            if cmd[1:2] in (["client"], ["gateway"]) and services:
                printed = getattr(services[0], cmd[1])
                for flag in ("--servers", "--key"):  # the README's command is the one serve --local printed
                    if cmd[cmd.index(flag) + 1] != printed[printed.index(flag) + 1]:
                        raise RuntimeError("its {} is not the one serve --local printed: {}".format(
                            flag, " ".join(printed)))
            if cmd[1:2] == ["gateway"]:
                if "--listen" in cmd:  # a free port rather than the README's, which may be taken
                    cmd[cmd.index("--listen") + 1] = "127.0.0.1:0"
                code, out = Background(cmd, work, "OpenAI-compatible at", args.timeout).stop(signal.SIGTERM)
                if code != 0:
                    raise RuntimeError("exit status {} when stopped: {}".format(code, tail(out)))
                ran += 1
                continue
        except RuntimeError as e:
            print("readme_commands: FAILED: `{}` ({}): {}".format(text, where, e))
            return 1
        status, out = run(cmd, work, args.timeout)
        if status != 0:
            what = "timed out after {:.0f} s".format(args.timeout) if status is None else "exit status {}".format(status)
            print(tail(out))
            print("readme_commands: FAILED: `{}` ({}): {}".format(text, where, what))
            return 1
        ran += 1
    print("readme_commands: {} commands {}, {} skipped".format(ran, "to run (dry run)" if args.dry_run else "ran",
                                                                skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
