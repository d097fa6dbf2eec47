"""mpcache.Client against `mpcache serve --local` (the fixture model)."""
import os
import time

import pytest

import mpcache
from conftest import FIXTURE_MODEL, wait_for

PROMPT = "It is a truth universally"


def client(service, **kw):
    return mpcache.Client(service.servers, service.key, FIXTURE_MODEL, tokenizer="none", **kw)


def test_generate_equals_in_process_generation(service):
    c = client(service)
    got = c.generate(PROMPT, tokens=4)
    want = mpcache.generate(PROMPT, model=FIXTURE_MODEL, tokenizer="none", tokens=4, processes=False)
    assert got.tokens == want.tokens and got.text == want.text
    assert got.end == "budget" and got.seconds_to_first_token > 0 and len(got.token_seconds) == 3
    assert c.generate(PROMPT, tokens=1).session != got.session  # each request is a session of its own


def test_stream_yields_each_token_and_its_text(service):
    c = client(service)
    with c.stream(PROMPT, tokens=5) as s:
        tokens = list(s)
    ids = [t.id for t in tokens if t.id >= 0]  # id -1: a last piece, bytes of an unfinished character
    assert ids == s.completion.tokens and len(ids) == 5
    assert "".join(t.text for t in tokens) == s.completion.text

def test_stream_cancelled_midway_ends_its_session_at_the_servers(service):
    c = client(service)
    s = c.stream(PROMPT, tokens=100)
    first = [next(s), next(s)]
    assert len(first) == 2
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 10
    assert s.next_token() is None  # closed: nothing more
    # Each server ends the session (it fails, naming the client's cancellation), long before 100 tokens.
    session_lines = lambda i: [l for l in service.log(i).splitlines() if "failed" in l and "cancel" in l]
    wait_for("server 0 to end the cancelled session", lambda: session_lines(0), 30)
    # The service goes on: the next request is served in full.
    assert len(c.generate(PROMPT, tokens=3).tokens) == 3


def test_refusal_carries_the_servers_reason(service):
    c = client(service)
    with pytest.raises(mpcache.Error) as e:
        c.generate(PROMPT, tokens=4, policy="no-such-policy")
    assert e.value.code == "invalid_argument"
    assert "refused" in str(e.value) and "no-such-policy" in str(e.value)


def test_bad_files_fail_at_construction(service, tmp_path):
    with pytest.raises(mpcache.Error) as e:
        mpcache.Client(str(tmp_path / "none.json"), service.key, FIXTURE_MODEL, tokenizer="none")
    assert "none.json" in str(e.value)
    with pytest.raises(mpcache.Error) as e:
        mpcache.Client(service.servers, str(tmp_path / "nobody.key"), FIXTURE_MODEL, tokenizer="none")
    assert "nobody.key" in str(e.value)


def test_a_stranger_is_refused_in_bounded_time(service, tmp_path):
    """A key the servers were not given: an error naming the refusal, not a hang."""
    import subprocess
    from conftest import CLI
    subprocess.run([CLI, "keygen", "--client", "eve", "--out", str(tmp_path)], check=True, capture_output=True)
    c = mpcache.Client(service.servers, str(tmp_path / "eve.key"), FIXTURE_MODEL, tokenizer="none", timeout_ms=5000)
    t0 = time.monotonic()
    with pytest.raises(mpcache.Error):
        c.generate(PROMPT, tokens=2)
    assert time.monotonic() - t0 < 20


def test_concurrent_streams_are_concurrent_sessions(service):
    """Two streams at once (as the gateway's concurrent requests are): two
    sessions, each with its own prompt's tokens."""
    c = client(service)
    prompts = [PROMPT, "Emma Woodhouse, handsome"]
    streams = [c.stream(p, tokens=6) for p in prompts]
    first = [next(s) for s in streams]  # both have begun before either ends
    rest = [list(s) for s in streams]
    for p, f, r, s in zip(prompts, first, rest, streams):
        want = mpcache.generate(p, model=FIXTURE_MODEL, tokenizer="none", tokens=6, processes=False)
        assert [f.id] + [t.id for t in r if t.id >= 0] == want.tokens
    assert streams[0].completion.session != streams[1].completion.session


def test_sampling_by_the_gumbel_max_trick(service):
    """temperature > 0: the same seed gives the same tokens, another seed
    others; a tiny temperature is greedy, a huge one near uniform. The first
    token is chosen in the session's own step, the others in batched steps:
    both add the noise."""
    c = client(service)
    greedy = c.generate(PROMPT, tokens=8).tokens
    a = c.generate(PROMPT, tokens=8, temperature=1.0, seed=11).tokens
    assert c.generate(PROMPT, tokens=8, temperature=1.0, seed=11).tokens == a
    assert c.generate(PROMPT, tokens=8, temperature=1.0, seed=12).tokens != a
    assert c.generate(PROMPT, tokens=8, temperature=1e-4, seed=13).tokens == greedy
    hot = c.generate(PROMPT, tokens=8, temperature=80.0, seed=14).tokens
    assert hot != greedy and len(set(hot)) >= 6
    with pytest.raises(mpcache.Error) as e:
        c.generate(PROMPT, tokens=2, temperature=-1.0)
    assert "temperature" in str(e.value)


def test_retries_are_counted_and_end_with_the_last_error(service, tmp_path):
    """A server that cannot be reached may be restarting: the request is
    sent again `retries` times, then fails naming the attempts. A request
    that needed no retry says so in its completion."""
    import json
    import socket
    folder = os.path.dirname(service.servers)
    with open(service.servers) as f:
        config = json.load(f)
    for p in config["parties"]:
        for k in ("public_key", "secret_key"):
            if k in p and not os.path.isabs(p[k]):
                p[k] = os.path.join(folder, p[k])
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    config["parties"][2]["client_port"] = s.getsockname()[1]  # nobody listens there
    s.close()
    broken = tmp_path / "cluster.json"
    broken.write_text(json.dumps(config))
    c = mpcache.Client(str(broken), service.key, FIXTURE_MODEL, tokenizer="none", retries=2, retry_wait_ms=10)
    with pytest.raises(mpcache.Error) as e:
        c.generate(PROMPT, tokens=2)
    assert e.value.code == "network" and "(3 attempts)" in str(e.value) and "server 2" in str(e.value)
    got = client(service, retries=2, retry_wait_ms=10).generate(PROMPT, tokens=2)
    assert got.attempts == 1 and got.retries == [] and len(got.tokens) == 2


def test_speculation_gives_the_same_tokens(service):
    """speculate K: the client drafts (prompt lookup), the servers verify
    K+1 rows a step; the tokens are greedy decoding's. K out of range and
    speculation with sampling are refused."""
    c = client(service)
    greedy = c.generate(PROMPT, tokens=8).tokens
    assert c.generate(PROMPT, tokens=8, speculate=3).tokens == greedy
    assert c.generate(PROMPT, tokens=8, speculate=2, draft="lookup").tokens == greedy
    with pytest.raises(ValueError):
        c.generate(PROMPT, tokens=2, speculate=17)
    with pytest.raises(mpcache.Error) as e:
        c.generate(PROMPT, tokens=2, speculate=2, temperature=1.0)
    assert "cannot sample" in str(e.value)
