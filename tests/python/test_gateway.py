"""mpcache gateway (OpenAI-compatible) against `mpcache serve --local` on the
fixture model, with the client's folder tests/fixtures/chat-model (the same
config.json, a chat template). The servers admit one session and queue
none, so a second request at once is "busy" (429)."""
import http.client
import json
import os
import shutil
import socket
import subprocess
import time

import jinja2
import pytest

import mpcache
from conftest import CLI, FIXTURE_MODEL, SOURCE, LocalService, wait_for

CHAT_MODEL = os.path.join(SOURCE, "tests", "fixtures", "chat-model")
PROMPT = "It is a truth universally"
OPENAI_CLIENT = os.path.join(SOURCE, ".tools", "openai-client")


class Gateway:
    def __init__(self, service, model, extra=()):
        self.proc = subprocess.Popen([CLI, "gateway", "--servers", service.servers, "--key", service.key, "--model",
                                      model, "--listen", "127.0.0.1:0", "--timeout-ms", "20000"] + list(extra),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "OpenAI-compatible at" not in line:
            self.proc.kill()
            pytest.fail("the gateway did not start: %r %s" % (line, self.proc.stderr.read()[-3000:]))
        self.url = line.split(" at ", 1)[1].split()[0]  # http://127.0.0.1:PORT/v1
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        self.model = os.path.basename(model)

    def request(self, method, path, body=None, raw=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        r = conn.getresponse()
        payload = r.read()
        conn.close()
        return r.status, r.getheader("Content-Type", ""), payload

    def post(self, path, body, **kw):
        status, ctype, payload = self.request("POST", path, body, **kw)
        return status, (json.loads(payload) if "json" in ctype else payload.decode())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


@pytest.fixture(scope="module")
def busy_service():
    s = LocalService(FIXTURE_MODEL, ["--max-sessions", "1", "--max-queued", "0"])
    yield s
    if s.proc.poll() is None:
        s.stop()


@pytest.fixture(scope="module")
def gateway(busy_service):
    g = Gateway(busy_service, CHAT_MODEL, ["--body-seconds", "2"])
    yield g
    g.stop()


def expected(prompt, tokens):
    return mpcache.generate(prompt, model=FIXTURE_MODEL, tokenizer="none", tokens=tokens, processes=False).text


def render_chat(messages):
    with open(os.path.join(CHAT_MODEL, "tokenizer_config.json")) as f:
        source = json.load(f)["chat_template"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(source).render(messages=messages, add_generation_prompt=True)


def post_when_free(g, path, body, timeout=30):
    """The request, once the one session the servers admit is free (a
    cancelled one ends at the servers a moment after its client left)."""
    deadline = time.monotonic() + timeout
    while True:
        status, out = g.post(path, body)
        if status != 429 or time.monotonic() > deadline:
            return status, out
        time.sleep(0.05)


def sse_events(text):
    events = [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_health_and_models(gateway):
    status, ctype, body = gateway.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, ctype, body = gateway.request("GET", "/v1/models")
    models = json.loads(body)
    assert status == 200 and models["object"] == "list" and [m["id"] for m in models["data"]] == ["chat-model"]


def test_completion_at_temperature_0_is_the_in_process_text(gateway):
    status, out = post_when_free(gateway, "/v1/completions",
                                 {"model": "chat-model", "prompt": PROMPT, "max_tokens": 5, "temperature": 0})
    assert status == 200, out
    assert out["object"] == "text_completion" and out["choices"][0]["text"] == expected(PROMPT, 5)
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": len(PROMPT), "completion_tokens": 5, "total_tokens": len(PROMPT) + 5}


def test_streamed_completion_with_usage_in_the_last_chunk(gateway):
    status, out = post_when_free(gateway, "/v1/completions",
                                 {"model": "chat-model", "prompt": PROMPT, "max_tokens": 5, "stream": True,
                                  "stream_options": {"include_usage": True}})
    assert status == 200, out
    events = sse_events(out)
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == expected(PROMPT, 5)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 5
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"


def test_chat_renders_the_models_template(gateway):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who is Emma?"}]
    status, out = post_when_free(gateway, "/v1/chat/completions",
                                 {"model": "chat-model", "messages": messages, "max_tokens": 4})
    assert status == 200, out
    assert out["object"] == "chat.completion" and out["choices"][0]["message"]["role"] == "assistant"
    assert out["choices"][0]["message"]["content"] == expected(render_chat(messages), 4)
    status, out = post_when_free(gateway, "/v1/chat/completions",
                                 {"model": "chat-model", "messages": messages, "max_tokens": 4, "stream": True})
    events = sse_events(out)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == expected(render_chat(messages), 4)


def test_curl_streams_and_gets_errors(gateway):
    """curl, as the docs show it (docs/python.md): a streamed completion, and
    an error body with its status."""
    base = "http://127.0.0.1:%d/v1/completions" % gateway.port
    body = json.dumps({"model": "chat-model", "prompt": PROMPT, "max_tokens": 4, "stream": True})
    deadline = time.monotonic() + 30
    while True:  # the one session the servers admit may still be ending (429)
        r = subprocess.run(["curl", "-sN", "-w", "\n%{http_code}", base, "-H", "Content-Type: application/json",
                            "-d", body], capture_output=True, text=True, timeout=120)
        out, code = r.stdout.rsplit("\n", 1)
        if code != "429" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert r.returncode == 0 and code == "200", r.stdout + r.stderr
    assert "".join(e["choices"][0]["text"] for e in sse_events(out) if e["choices"]) == expected(PROMPT, 4)
    r = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", base, "-d", "{not json"], capture_output=True,
                       text=True, timeout=60)
    out, code = r.stdout.rsplit("\n", 1)
    assert code == "400" and json.loads(out)["error"]["type"] == "invalid_request_error"


def test_temperature_samples_reproducibly_with_a_seed(gateway):
    body = {"model": "chat-model", "prompt": PROMPT, "max_tokens": 8, "temperature": 1.0, "seed": 21}
    texts = []
    for seed in (21, 21, 22):
        status, out = post_when_free(gateway, "/v1/completions", dict(body, seed=seed))
        assert status == 200, out
        texts.append(out["choices"][0]["text"])
    assert texts[0] == texts[1] and texts[0] != texts[2]
    assert texts[0] != expected(PROMPT, 8)  # not the greedy text


def test_stop_strings_cut_the_text(gateway):
    full = expected(PROMPT, 8)
    stop = full[3:5]
    status, out = post_when_free(gateway, "/v1/completions",
                                 {"model": "chat-model", "prompt": PROMPT, "max_tokens": 8, "stop": [stop]})
    assert status == 200, out
    assert out["choices"][0]["text"] == full[:full.find(stop)] and out["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("body,status,param", [
    ({"model": "chat-model", "prompt": PROMPT, "max_tokens": 4, "colour": "blue"}, 400, "colour"),
    ({"model": "chat-model", "prompt": PROMPT, "max_tokens": 10 ** 12}, 400, "max_tokens"),
    ({"model": "chat-model", "prompt": PROMPT, "max_tokens": -3}, 400, "max_tokens"),
    ({"model": "chat-model", "prompt": PROMPT, "max_tokens": "four"}, 400, "max_tokens"),
    ({"model": "gpt-5", "prompt": PROMPT, "max_tokens": 4}, 404, "model"),
    ({"model": "chat-model", "prompt": PROMPT, "temperature": 3}, 400, "temperature"),
    ({"model": "chat-model", "prompt": PROMPT, "temperature": 0.5, "seed": "seven"}, 400, "seed"),
    ({"model": "chat-model", "prompt": PROMPT, "top_p": 0.5}, 400, "top_p"),
    ({"model": "chat-model", "prompt": PROMPT, "n": 2}, 400, "n"),
    ({"model": "chat-model", "prompt": PROMPT, "logprobs": 2}, 400, "logprobs"),
    ({"model": "chat-model", "prompt": ""}, 400, "prompt"),
    ({"model": "chat-model", "prompt": PROMPT, "stop": 7}, 400, "stop"),
])
def test_bad_requests_get_openai_errors(gateway, body, status, param):
    got, out = gateway.post("/v1/completions", body)
    assert got == status, out
    assert set(out["error"]) == {"message", "type", "param", "code"} and out["error"]["param"] == param
    assert out["error"]["message"]


def test_malformed_json_and_oversized_body(gateway):
    status, out = gateway.post("/v1/completions", None, raw=b'{"model": "chat-model", "prompt": ')
    assert status == 400 and "not valid JSON" in out["error"]["message"]
    status, out = gateway.post("/v1/chat/completions", None, raw=b"[1, 2]")
    assert status == 400 and out["error"]["type"] == "invalid_request_error"
    status, out = gateway.post("/v1/completions", {"model": "chat-model", "prompt": "x" * (2 << 20)})
    assert status == 413 and "larger than" in out["error"]["message"]


def test_a_slow_loris_gets_408_and_harms_no_other_request(gateway):
    """One client sends headers and never its body; another trickles its
    headers a byte at a time. Other requests are served meanwhile, and the
    first gets 408 after --body-seconds (2 s here)."""
    slow = socket.create_connection(("127.0.0.1", gateway.port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{")
    trickle = socket.create_connection(("127.0.0.1", gateway.port))
    trickle.sendall(b"GET /hea")
    t0 = time.monotonic()
    status, out = post_when_free(gateway, "/v1/completions", {"model": "chat-model", "prompt": PROMPT, "max_tokens": 3})
    assert status == 200 and out["choices"][0]["text"] == expected(PROMPT, 3)
    slow.settimeout(30)
    reply = ""
    while "did not arrive" not in reply:  # the headers and the body may come in two segments
        chunk = slow.recv(4096).decode()
        if not chunk:
            break
        reply += chunk
    assert reply.startswith("HTTP/1.1 408") and "did not arrive" in reply
    assert time.monotonic() - t0 < 30
    slow.close()
    trickle.close()


def test_busy_is_429_and_a_dropped_stream_ends_its_session(gateway, busy_service):
    """The servers admit one session: while a stream holds it, a second
    request is refused "busy" (429). The streaming client then disconnects
    mid-stream; its session ends at the servers and the next request runs."""
    failed_before = busy_service.log(0).count("failed")
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"model": "chat-model", "prompt": PROMPT, "max_tokens": 90, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    assert r.readline().startswith(b"data: ")  # a first token came: the session runs
    status, out = gateway.post("/v1/completions", {"model": "chat-model", "prompt": PROMPT, "max_tokens": 2})
    assert status == 429 and out["error"]["code"] == "busy" and "busy" in out["error"]["message"]
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    wait_for("server 0 to end the dropped stream's session",
             lambda: busy_service.log(0).count("failed") > failed_before, 30)
    status, out = post_when_free(gateway, "/v1/completions", {"model": "chat-model", "prompt": PROMPT, "max_tokens": 2})
    assert status == 200, out


def test_chat_without_a_template_is_400_naming_it(busy_service):
    g = Gateway(busy_service, FIXTURE_MODEL, ["--tokenizer", "none"])
    try:
        status, out = g.post("/v1/chat/completions", {"model": "fixture", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and "chat template" in out["error"]["message"]
        assert out["error"]["code"] == "no_chat_template"
    finally:
        g.stop()


def test_off_loopback_needs_an_api_key_and_tls(busy_service):
    r = subprocess.run([CLI, "gateway", "--servers", busy_service.servers, "--key", busy_service.key, "--model",
                        CHAT_MODEL, "--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--api-key-file" in r.stderr and "--tls-cert" in r.stderr


def test_api_key_is_checked(busy_service, tmp_path):
    key_file = tmp_path / "api.key"
    key_file.write_text("s3cret\n")
    g = Gateway(busy_service, CHAT_MODEL, ["--api-key-file", str(key_file)])
    try:
        status, _, body = g.request("GET", "/v1/models")
        assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
        status, _, body = g.request("GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert status == 200
    finally:
        g.stop()


def test_the_official_openai_npm_client(gateway):
    """node + the `openai` package (tools/setup.sh installs it into
    .tools/openai-client from tests/gateway/package-lock.json)."""
    modules = os.path.join(OPENAI_CLIENT, "node_modules")
    if not os.path.isdir(os.path.join(modules, "openai")):
        pytest.fail("the openai npm package is not installed: run tools/setup.sh (it fills %s)" % modules)
    local_node = os.path.join(SOURCE, ".tools", "bin", "node")  # setup.sh's, where the system's is older than 18
    node = local_node if os.path.exists(local_node) else shutil.which("node")
    assert node, "node is not installed (tools/setup.sh)"
    prompt = "Emma Woodhouse"
    env = dict(os.environ, NODE_PATH=modules)
    deadline = time.monotonic() + 60
    while True:  # the one session may still be held by a request of a test before
        r = subprocess.run([node, os.path.join(SOURCE, "tests", "gateway", "openai_client.cjs"), gateway.url,
                            "chat-model", prompt, "4"], capture_output=True, text=True, timeout=300, env=env)
        if r.returncode == 0 or "429" not in r.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    want = expected(prompt, 4)
    assert out["completion"] == out["completion_stream"] == want
    assert out["completion_finish"] == "length" and out["completion_usage"]["completion_tokens"] == 4
    assert out["completion_stream_usage"]["completion_tokens"] == 4
    chat_want = expected(render_chat([{"role": "user", "content": prompt}]), 4)
    assert out["chat"] == out["chat_stream"] == chat_want and out["chat_role"] == "assistant"
    assert out["hot"] == out["hot_again"] and out["hot"] != chat_want  # sampled, reproducibly with a seed
    assert out["missing_model"]["status"] == 404


def test_a_speculating_gateway_gives_the_same_text(busy_service):
    """--speculate 3: greedy requests verify the gateway's drafts; the text
    is the in-process one."""
    g = Gateway(busy_service, CHAT_MODEL, ["--speculate", "3"])
    try:
        status, out = post_when_free(g, "/v1/completions",
                                     {"model": "chat-model", "prompt": PROMPT, "max_tokens": 6, "temperature": 0})
        assert status == 200, out
        assert out["choices"][0]["text"] == expected(PROMPT, 6)
    finally:
        g.stop()


def test_a_dead_server_is_503(gateway, busy_service):
    """Last: kills server 2. The gateway answers 503 naming the server."""
    import signal as sig
    pid = busy_service.proc.pid
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        children = [int(c) for c in f.read().split()]
    def args(child):
        with open("/proc/%d/cmdline" % child, "rb") as f:
            return f.read().split(b"\0")
    server2 = [c for c in children if b"serve" in args(c) and args(c)[args(c).index(b"--id") + 1] == b"2"]
    assert len(server2) == 1
    os.kill(server2[0], sig.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        status, out = gateway.post("/v1/completions", {"model": "chat-model", "prompt": PROMPT, "max_tokens": 2})
        if status == 503 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status == 503 and out["error"]["type"] == "service_unavailable", out

