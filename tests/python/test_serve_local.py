"""`mpcache serve --local`, as a user runs it from the build tree: it prints
a client command that works as printed, and Ctrl-C stops all three servers
and removes its folder."""
import json
import os
import signal
import subprocess

from conftest import CLI, LocalService, wait_for


def test_serve_local_prints_a_working_client_command_and_stops_on_ctrl_c(tmp_path):
    s = LocalService(None)  # the bundled model, serve's default
    try:
        assert s.client_command[:2] == [CLI, "client"] and s.gateway_command[:2] == [CLI, "gateway"]
        assert os.path.exists(s.servers) and os.path.exists(s.key)
        with open(s.servers) as f:
            cluster = json.load(f)
        assert [p["host"] for p in cluster["parties"]] == ["127.0.0.1"] * 3
        assert all(p["client_port"] and p["public_key"] == "p%d.pub" % i for i, p in enumerate(cluster["parties"]))
        r = subprocess.run(s.client_command, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        prompt = s.client_command[s.client_command.index("--prompt") + 1]
        tokens = s.client_command[s.client_command.index("--tokens") + 1]
        out = tmp_path / "gen.jsonl"
        g = subprocess.run([CLI, "generate", "--in-process", "--prompt", prompt, "--tokens", tokens, "--json", str(out)],
                           capture_output=True, text=True, timeout=300)
        assert g.returncode == 0, g.stderr
        summary = next(json.loads(l) for l in out.read_text().splitlines() if '"summary"' in l)
        assert r.stdout == summary["text"] + "\n"
        pid = s.proc.pid
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            servers = [int(c) for c in f.read().split()]
        assert len(servers) == 3
    finally:
        status, output, err = s.stop(signal.SIGINT)
    assert status == 0, err
    assert "stopped" in output
    assert not os.path.exists(s.folder)
    for p in servers:
        assert not os.path.exists("/proc/%d" % p) or open("/proc/%d/stat" % p).read().split()[2] == "Z"

