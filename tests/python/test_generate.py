"""mpcache.generate: the three parties of one generation on this host."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import mpcache
from conftest import CLI, FIXTURE_MODEL, wait_for


def cli_generate(args, tmp_path):
    out = tmp_path / "gen.jsonl"
    r = subprocess.run([CLI, "generate"] + args + ["--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines() if line]
    return next(r for r in rows if r["row"] == "summary")


def test_same_text_as_the_cli(tmp_path):
    """The issue's Done-when, as written: the one-liner prints the text of
    the summary row of `mpcache generate --prompt 'It is a truth' --tokens 4
    --json F` (three processes each, the bundled model)."""
    summary = cli_generate(["--prompt", "It is a truth", "--tokens", "4"], tmp_path)
    r = subprocess.run(["/usr/bin/python3", "-c",
                        "import mpcache; print(mpcache.generate('It is a truth', tokens=4).text)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(summary["text"]) == 4
    assert r.stdout == summary["text"] + "\n"


def test_in_process_steps_and_costs(tmp_path):
    """processes=False: the text of `generate --in-process`, one step per
    token with its costs, the steps' texts adding up to the text."""
    g = mpcache.generate("Emma Woodhouse", model=FIXTURE_MODEL, tokenizer="none", tokens=5, processes=False)
    summary = cli_generate(["--in-process", "--model", FIXTURE_MODEL, "--tokenizer", "none", "--prompt",
                            "Emma Woodhouse", "--tokens", "5"], tmp_path)
    assert g.tokens == summary["tokens"] and g.text == summary["text"]
    assert g.prompt_tokens == list(b"Emma Woodhouse")
    assert [s.phase for s in g.steps] == ["prefill"] + ["decode"] * 4
    assert [s.token for s in g.steps] == g.tokens
    assert "".join(s.text for s in g.steps) == g.text
    for s in g.steps:
        assert s.latency_s > 0 and s.rounds > 0 and s.bytes_max_party > 0 and s.bytes_total >= s.bytes_max_party
    assert g.summary["decode_steps"] == 4 and g.end == "budget" and len(g.parties) == 3


def test_processes_and_in_process_agree():
    a = mpcache.generate("It was", model=FIXTURE_MODEL, tokenizer="none", tokens=3, processes=True)
    b = mpcache.generate("It was", model=FIXTURE_MODEL, tokenizer="none", tokens=3, processes=False)
    assert a.tokens == b.tokens and a.text == b.text
    assert a.transport.startswith("tcp") and not b.transport.startswith("tcp")


@pytest.mark.parametrize("kwargs,code,words", [
    (dict(policy="no-such-policy"), "invalid_argument", "no-such-policy"),
    (dict(model="/nonexistent/model"), "io", "/nonexistent/model"),
    (dict(tokens=0), "invalid_argument", "tokens"),
    (dict(tokens=500), "invalid_argument", "positions"),
    (dict(protocol="rss4"), "invalid_argument", "rss4"),
    (dict(link="carrier-pigeon"), "invalid_argument", "carrier-pigeon"),
])
def test_bad_options_raise_our_error(kwargs, code, words):
    args = dict(model=FIXTURE_MODEL, tokenizer="none", tokens=2, processes=False)
    args.update(kwargs)
    t0 = time.monotonic()
    with pytest.raises(mpcache.Error) as e:
        mpcache.generate("It was", **args)
    assert time.monotonic() - t0 < 10
    assert e.value.code == code, str(e.value)
    assert words in str(e.value)


def test_prompt_must_be_text():
    with pytest.raises(TypeError):
        mpcache.generate(b"bytes")


def test_gil_is_released_while_the_parties_run():
    """Another Python thread runs while generate() does: this thread's
    ticks (every 5 ms) go on between the call's start and its end. A call
    that held the GIL would stop them for its whole length."""
    span = {}

    def work():
        span["start"] = time.monotonic()
        span["g"] = mpcache.generate("It was", model=FIXTURE_MODEL, tokenizer="none", tokens=100, processes=False)
        span["end"] = time.monotonic()

    t = threading.Thread(target=work)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.monotonic())
        time.sleep(0.005)
    t.join()
    assert len(span["g"].tokens) == 100
    inside = [x for x in ticks if span["start"] + 0.02 < x < span["end"] - 0.02]
    length = span["end"] - span["start"]
    assert length > 0.1, "the generation was too short to tell"
    assert len(inside) >= max(3, int(length / 0.005 / 10)), (len(inside), length)


def test_ctrl_c_cancels_the_parties_and_raises_keyboard_interrupt(tmp_path):
    """SIGINT while three party processes run: they are cancelled, and Python
    sees KeyboardInterrupt, in bounded time; its own handler is back after."""
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import signal, sys, mpcache\n"
        "try:\n"
        "    mpcache.generate('It is a truth', tokens=400, processes=True)\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    p = subprocess.Popen(["/usr/bin/python3", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = "/proc/%d/task/%d/children" % (p.pid, p.pid)

    def parties_running():
        try:
            with open(children) as f:
                return len(f.read().split()) == 3
        except OSError:
            return False

    wait_for("the three party processes to start", parties_running, 120,
             lambda: "python exited" if p.poll() is not None else None)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert out.strip() == "interrupted True", (out, err)
    assert time.monotonic() - t0 < 30
