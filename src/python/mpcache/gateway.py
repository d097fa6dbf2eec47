"""An OpenAI-compatible HTTP endpoint in front of a private inference service.

    mpcache gateway --servers cluster.json --key NAME.key --model DIR [--listen 127.0.0.1:8000]
    (= /usr/bin/python3 -m mpcache.gateway ...)

The gateway is the service's client on behalf of local applications: each
request becomes a request of :class:`mpcache.Client`, so the prompt is
secret-shared on this host before it leaves it, and the text is
reconstructed here. Routes: ``GET /health``, ``GET /v1/models``,
``POST /v1/completions``, ``POST /v1/chat/completions`` (messages rendered
with the model folder's ``chat_template`` from ``tokenizer_config.json``, by
Jinja's sandbox). Streaming is server-sent events as OpenAI sends them.
Errors have OpenAI's shape, ``{"error": {"message", "type", "param",
"code"}}``: a bad request 400, a wrong API key 401, an unknown model 404, a
body too large 413, a slow body 408, a busy service 429, a dead server 503.

``temperature`` 0 decodes greedily; above 0 the gateway (the client) draws
temperature x Gumbel(0, 1) noise for each token and vocabulary entry from
``seed`` (random when absent), secret-shares it, and the servers choose the
argmax of logits plus noise (the Gumbel-max trick), so no server learns the
noise. ``top_p`` < 1, ``n`` > 1 and ``logprobs`` get 400 naming the field.

A client that disconnects mid-stream ends its session at the servers.
Concurrent requests are concurrent sessions. The gateway listens on
loopback by default; any other address needs ``--api-key-file`` (checked in
constant time) and TLS (``--tls-cert``, ``--tls-key``).
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hmac
import ipaddress
import json
import os
import ssl
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from aiohttp import web

import mpcache

MAX_BODY = 1 << 20          # bytes of a request body
BODY_SECONDS = 10.0         # a body must arrive within this long (slow clients get 408)

COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "stop", "stream", "stream_options", "temperature", "top_p",
                     "n", "logprobs", "seed", "user", "echo", "presence_penalty", "frequency_penalty", "best_of",
                     "logit_bias", "suffix"}
CHAT_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "stop", "stream", "stream_options",
               "temperature", "top_p", "n", "logprobs", "top_logprobs", "seed", "user", "presence_penalty",
               "frequency_penalty", "logit_bias", "response_format", "tools", "tool_choice", "parallel_tool_calls"}
# Accepted only at the value that changes nothing.
NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0, "echo": False, "best_of": 1, "logit_bias": {},
           "suffix": None, "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
           "parallel_tool_calls": None, "top_logprobs": None}


class ApiError(Exception):
    """An OpenAI-shaped error: HTTP status, message, type, param, code."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: Optional[str] = None,
                 code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def response(self) -> web.Response:
        return web.json_response({"error": {"message": self.message, "type": self.type, "param": self.param,
                                            "code": self.code}}, status=self.status)


def bad(message: str, param: Optional[str] = None, code: Optional[str] = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param, code)


def service_error(e: mpcache.Error) -> ApiError:
    """The service's error as HTTP: busy 429, a refusal 400, a dead or silent server 503."""
    text = str(e)
    if "busy" in text:
        return ApiError(429, text, "rate_limit_error", None, "busy")
    if e.code == "invalid_argument":
        return ApiError(400, text, "invalid_request_error", None, "refused")
    if e.code in ("network", "timeout", "io", "protocol", "cancelled"):
        return ApiError(503, text, "service_unavailable", None, e.code)
    return ApiError(500, text, "server_error", None, e.code)


class ChatTemplate:
    """The model folder's chat template (tokenizer_config.json's
    ``chat_template``), rendered by Jinja's immutable sandbox as Hugging
    Face's apply_chat_template does."""

    def __init__(self, model_dir: str) -> None:
        self.source: Optional[str] = None
        self.bos_token = self.eos_token = ""
        self.error = "the model has no chat template: its folder %s has no tokenizer_config.json" % model_dir
        path = os.path.join(model_dir, "tokenizer_config.json")
        if not os.path.exists(path):
            return
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str) or not template:
            self.error = "the model has no chat template (%s has no chat_template)" % path
            return

        def token(value: Any) -> str:
            return value.get("content", "") if isinstance(value, dict) else (value or "")

        self.bos_token, self.eos_token = token(config.get("bos_token")), token(config.get("eos_token"))
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        self.template = env.from_string(template)
        self.source = template

    def render(self, messages: List[Dict[str, Any]]) -> str:
        if self.source is None:
            raise bad(self.error, "messages", "no_chat_template")
        import jinja2
        try:
            return self.template.render(messages=messages, add_generation_prompt=True, bos_token=self.bos_token,
                                        eos_token=self.eos_token)
        except jinja2.exceptions.TemplateError as e:
            raise bad("the chat template refused the messages: %s" % e, "messages")


class Gateway:
    def __init__(self, client: mpcache.Client, model_name: str, template: ChatTemplate,
                 api_key: Optional[str] = None, max_body: int = MAX_BODY, body_seconds: float = BODY_SECONDS,
                 workers: int = 64, speculate: int = 0, draft: str = "lookup") -> None:
        self.client, self.model_name, self.template = client, model_name, template
        # Greedy requests (temperature 0) speculate this many tokens a step
        # with this drafter (docs/serving.md, "Speculation"); sampled ones do not.
        self.speculate, self.draft = speculate, draft
        self.api_key, self.max_body, self.body_seconds = api_key, max_body, body_seconds
        # Each running stream waits for its next token on a thread of this pool.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mpcache-stream")
        self.created = int(time.time())

    # -- the app ---------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body, middlewares=[self.errors])
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        return app

    @web.middleware
    async def errors(self, request: web.Request, handler):
        try:
            if self.api_key is not None and request.path != "/health":
                given = request.headers.get("Authorization", "")
                expected = "Bearer " + self.api_key
                if not hmac.compare_digest(given.encode(), expected.encode()):
                    raise ApiError(401, "a missing or wrong API key (Authorization: Bearer KEY)",
                                   "invalid_request_error", None, "invalid_api_key")
            return await handler(request)
        except ApiError as e:
            return e.response()
        except web.HTTPException as e:
            if e.status == 413:
                return ApiError(413, "the request body is larger than %d bytes" % self.max_body).response()
            return ApiError(e.status, e.reason or "HTTP %d" % e.status, "invalid_request_error").response()

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "model": self.model_name})

    def model_entry(self) -> Dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "mpcache"}

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self.model_entry()]})

    async def model(self, request: web.Request) -> web.Response:
        self.check_model(request.match_info["model"])
        return web.json_response(self.model_entry())

    # -- requests --------------------------------------------------------
    async def body(self, request: web.Request) -> Dict[str, Any]:
        if request.content_length is not None and request.content_length > self.max_body:
            raise ApiError(413, "the request body is larger than %d bytes" % self.max_body)
        try:
            raw = await asyncio.wait_for(request.read(), self.body_seconds)
        except asyncio.TimeoutError:
            raise ApiError(408, "the request body did not arrive within %g s" % self.body_seconds)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise bad("the body is not valid JSON: %s" % e)
        if not isinstance(body, dict):
            raise bad("the body must be a JSON object")
        return body

    def check_model(self, name: Any) -> None:
        if name != self.model_name:
            raise ApiError(404, "the model %r does not exist: this gateway serves %r" % (name, self.model_name),
                           "invalid_request_error", "model", "model_not_found")

    def check_fields(self, body: Dict[str, Any], fields: set) -> None:
        for key in body:
            if key not in fields:
                raise bad("unknown field %r" % key, key, "unknown_field")
        if "model" not in body:
            raise bad("'model' is required", "model")
        self.check_model(body["model"])

    def common(self, body: Dict[str, Any], prompt_tokens: int) -> Dict[str, Any]:
        """The options every route shares, checked: 400 names the field."""
        for key, neutral in NEUTRAL.items():
            if key in body and body[key] not in (neutral, None):
                raise bad("%r is not supported (only %r)" % (key, neutral), key, "unsupported")
        temperature = body.get("temperature", 0)
        if temperature is None:
            temperature = 0
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
            raise bad("'temperature' must be a number from 0 to 2", "temperature")
        top_p = body.get("top_p", 1)
        if top_p is not None and (not isinstance(top_p, (int, float)) or top_p != 1):
            raise bad("'top_p' < 1 is not supported: tokens are sampled from the whole vocabulary", "top_p",
                      "unsupported")
        n = body.get("n", 1)
        if n is not None and n != 1:
            raise bad("'n' > 1 is not supported: one choice per request", "n", "unsupported")
        if body.get("logprobs") not in (None, False, 0):
            raise bad("'logprobs' is not supported: the servers open the chosen token only", "logprobs",
                      "unsupported")
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise bad("'seed' must be an integer", "seed")
        room = self.client.max_positions - prompt_tokens
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        max_tokens = body.get(key)
        if max_tokens is None:
            max_tokens = min(16 if key == "max_tokens" and "messages" not in body else room, room)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise bad("%r must be a positive integer" % key, key)
        if max_tokens > room:
            raise bad("%r is %d, but the prompt (%d tokens) leaves room for %d of the model's %d positions" %
                      (key, max_tokens, prompt_tokens, max(room, 0), self.client.max_positions), key,
                      "context_length_exceeded")
        stop = body.get("stop")
        if stop is None:
            stops: List[str] = []
        elif isinstance(stop, str):
            stops = [stop]
        elif isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop):
            stops = list(stop)
        else:
            raise bad("'stop' must be a string or a list of at most 4 strings", "stop")
        stops = [s for s in stops if s]
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise bad("'stream' must be a boolean", "stream")
        options = body.get("stream_options")
        if options is not None:
            if not stream:
                raise bad("'stream_options' needs 'stream': true", "stream_options")
            if not isinstance(options, dict) or set(options) - {"include_usage"}:
                raise bad("'stream_options' takes only include_usage", "stream_options")
        usage = bool(options and options.get("include_usage"))
        return {"max_tokens": max_tokens, "stops": stops, "stream": stream, "usage": usage,
                "temperature": float(temperature), "seed": seed}

    def prompt_tokens(self, prompt: str) -> int:
        try:
            return len(self.client.encode(prompt))
        except mpcache.Error as e:
            raise bad(str(e), "prompt")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self.body(request)
        self.check_fields(body, COMPLETION_FIELDS)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise bad("'prompt' must be a non-empty string", "prompt")
        n_prompt = self.prompt_tokens(prompt)
        opts = self.common(body, n_prompt)
        return await self.run(request, prompt, n_prompt, opts, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self.body(request)
        self.check_fields(body, CHAT_FIELDS)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad("'messages' must be a non-empty list", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise bad("messages[%d] needs a 'role'" % i, "messages")
            content = m.get("content")
            if isinstance(content, list):  # content parts: text only
                if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                           for p in content):
                    raise bad("messages[%d]: only text content parts are supported" % i, "messages")
                m = dict(m, content="".join(p["text"] for p in content))
                messages[i] = m
            elif not isinstance(content, str):
                raise bad("messages[%d] needs a string 'content'" % i, "messages")
        prompt = self.template.render(messages)
        if not prompt:
            raise bad("the chat template made an empty prompt", "messages")
        n_prompt = self.prompt_tokens(prompt)
        opts = self.common(body, n_prompt)
        return await self.run(request, prompt, n_prompt, opts, chat=True)

    # -- one session -----------------------------------------------------
    async def next_token(self, stream: mpcache.TokenStream):
        return await asyncio.get_running_loop().run_in_executor(self.pool, stream.next_token)

    async def run(self, request: web.Request, prompt: str, n_prompt: int, opts: Dict[str, Any],
                  chat: bool) -> web.StreamResponse:
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        try:
            greedy = opts["temperature"] == 0
            stream = self.client.stream(prompt, tokens=opts["max_tokens"], temperature=opts["temperature"],
                                        seed=opts["seed"], speculate=self.speculate if greedy else 0,
                                        draft=self.draft)
        except mpcache.Error as e:
            raise service_error(e)
        response: Optional[web.StreamResponse] = None
        text, sent, scanned, n_tokens, finish = "", 0, 0, 0, "length"
        stops = opts["stops"]
        hold = max((len(s) for s in stops), default=1) - 1  # text held back: it may start a stop string

        def chunk(delta_text: Optional[str], finish_reason: Optional[str], role: bool = False) -> Dict[str, Any]:
            if chat:
                delta: Dict[str, Any] = {}
                if role:
                    delta["role"] = "assistant"
                if delta_text is not None:
                    delta["content"] = delta_text
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.model_name,
                        "system_fingerprint": None, "choices": [choice]}
            choice = {"index": 0, "text": delta_text or "", "logprobs": None, "finish_reason": finish_reason}
            return {"id": rid, "object": "text_completion", "created": created, "model": self.model_name,
                    "system_fingerprint": None, "choices": [choice]}

        async def send(obj: Dict[str, Any]) -> None:
            assert response is not None
            await response.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")

        try:
            first = True
            while True:
                try:
                    token = await self.next_token(stream)
                except mpcache.Error as e:
                    if response is None:
                        raise service_error(e)
                    err = service_error(e)  # mid-stream: an error event, as OpenAI sends one
                    await response.write(b"data: " + json.dumps({"error": {
                        "message": err.message, "type": err.type, "param": None, "code": err.code}}).encode() + b"\n\n")
                    return response
                if first and opts["stream"]:
                    # The first token: the request was accepted. Headers go now.
                    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
                    await response.prepare(request)
                    if chat:
                        await send(chunk("", None, role=True))
                first = False
                if token is None:
                    break
                if token.id >= 0:
                    n_tokens += 1
                if token.id in self.client.eos_ids:
                    finish = "stop"
                text += token.text
                cut = -1  # where the first stop string starts, if one is complete now
                for s in stops:
                    at = text.find(s, max(0, scanned - len(s) + 1))
                    if at >= 0 and (cut < 0 or at < cut):
                        cut = at
                scanned = len(text)
                if cut >= 0:
                    text, finish = text[:cut], "stop"
                    stream.close()  # the rest is not needed: the session ends at the servers
                if opts["stream"] and len(text) - (0 if cut >= 0 else hold) > sent:
                    upto = len(text) if cut >= 0 else len(text) - hold
                    await send(chunk(text[sent:upto], None))
                    sent = upto
                if cut >= 0:
                    break
            usage = {"prompt_tokens": n_prompt, "completion_tokens": n_tokens, "total_tokens": n_prompt + n_tokens}
            if opts["stream"]:
                if len(text) > sent:
                    await send(chunk(text[sent:], None))
                await send(chunk(None if chat else "", finish))
                if opts["usage"]:
                    last = chunk(None, None)
                    last["choices"] = []
                    last["usage"] = usage
                    await send(last)
                await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                          "finish_reason": finish}
                obj = {"id": rid, "object": "chat.completion", "created": created, "model": self.model_name,
                       "system_fingerprint": None, "choices": [choice], "usage": usage}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
                obj = {"id": rid, "object": "text_completion", "created": created, "model": self.model_name,
                       "system_fingerprint": None, "choices": [choice], "usage": usage}
            return web.json_response(obj)
        finally:
            # A client gone mid-stream (the write failed, or aiohttp cancelled
            # this handler) ends its session at the servers.
            await asyncio.get_running_loop().run_in_executor(self.pool, stream.close)


def parse_listen(listen: str) -> Tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SystemExit("mpcache gateway: --listen HOST:PORT, not %r" % listen)
    return host.strip("[]") or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="mpcache gateway", description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", required=True, help="the servers' cluster.json (host, client_port, public_key)")
    ap.add_argument("--key", required=True, help="this client's NAME.key (NAME.pub beside it)")
    ap.add_argument("--model", default=None, help="the model folder: config.json, tokenizer, tokenizer_config.json")
    ap.add_argument("--model-name", default=None, help="the model's name in the API (default: the folder's name)")
    ap.add_argument("--tokenizer", default="auto", help="the client's tokenizer: auto, none or a folder")
    ap.add_argument("--listen", default="127.0.0.1:8000", help="HOST:PORT (port 0: any free one; it is printed)")
    ap.add_argument("--api-key-file", default=None, help="a file holding the API key clients must send as Bearer")
    ap.add_argument("--tls-cert", default=None, help="TLS certificate (PEM): needed off loopback")
    ap.add_argument("--tls-key", default=None, help="TLS private key (PEM)")
    ap.add_argument("--timeout-ms", type=int, default=60000, help="how long a server may stay silent")
    ap.add_argument("--retries", type=int, default=0,
                    help="send a request the service failed (a server lost, busy, shutting down) again, up to this "
                         "many times; tokens already streamed are not streamed again")
    ap.add_argument("--retry-wait-ms", type=int, default=1000, help="wait this long before each retry")
    ap.add_argument("--max-body", type=int, default=MAX_BODY, help="the largest request body, bytes")
    ap.add_argument("--body-seconds", type=float, default=BODY_SECONDS, help="a request body arrives within this")
    ap.add_argument("--speculate", type=int, default=0,
                    help="greedy requests (temperature 0) verify up to this many tokens the gateway drafts a step "
                         "(0..16; the servers learn how many each step accepted)")
    ap.add_argument("--draft", default="lookup", help="the drafter for --speculate: lookup, ngram:FILE or model:DIR")
    a = ap.parse_args(argv)
    if not 0 <= a.speculate <= 16:
        print("mpcache gateway: --speculate %d is outside 0..16" % a.speculate, file=sys.stderr)
        return 2
    host, port = parse_listen(a.listen)
    if not is_loopback(host) and (not a.api_key_file or not a.tls_cert or not a.tls_key):
        print("mpcache gateway: %s is not a loopback address: prompts would cross a network; give --api-key-file, "
              "--tls-cert and --tls-key" % host, file=sys.stderr)
        return 2
    api_key = None
    if a.api_key_file:
        with open(a.api_key_file, encoding="utf-8") as f:
            api_key = f.read().strip()
        if not api_key:
            print("mpcache gateway: %s is empty" % a.api_key_file, file=sys.stderr)
            return 2
    tls = None
    if a.tls_cert or a.tls_key:
        if not (a.tls_cert and a.tls_key):
            print("mpcache gateway: TLS needs both --tls-cert and --tls-key", file=sys.stderr)
            return 2
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(a.tls_cert, a.tls_key)
    model = a.model or mpcache.default_model()
    try:
        client = mpcache.Client(a.servers, a.key, model, tokenizer=a.tokenizer, timeout_ms=a.timeout_ms,
                                retries=a.retries, retry_wait_ms=a.retry_wait_ms)
        template = ChatTemplate(model)
    except (mpcache.Error, OSError, ValueError) as e:
        print("mpcache gateway: %s" % e, file=sys.stderr)
        return 1
    name = a.model_name or os.path.basename(os.path.normpath(model))
    gateway = Gateway(client, name, template, api_key, a.max_body, a.body_seconds, speculate=a.speculate,
                      draft=a.draft)

    async def serve() -> None:
        runner = web.AppRunner(gateway.app(), access_log=None, handle_signals=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=tls)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        print("mpcache gateway: model %s, OpenAI-compatible at %s://%s:%d/v1 (%s)" %
              (name, "https" if tls else "http", host, bound,
               "chat template from tokenizer_config.json" if template.source else template.error), flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(serve())
    except (KeyboardInterrupt, web.GracefulExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
