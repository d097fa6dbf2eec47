"""mpcache: private LLM inference under three-party MPC, from Python.

Two ways in:

* ``mpcache.generate(prompt, ...)`` runs the three parties of one private
  generation on this host, as ``mpcache generate`` does (three party
  processes on loopback TCP with fresh keys, or ``processes=False``: all
  three in this process), and returns a :class:`Generation`: the text, the
  tokens and each step's costs.
* ``mpcache.Client(servers, key, model)`` asks a running service (three
  ``mpcache serve`` processes): ``.generate(prompt)`` returns a
  :class:`Completion`, ``.stream(prompt)`` yields :class:`Token` objects as
  the servers choose them.

The parties run without the GIL. Every failure is an :class:`Error` carrying
the library's own message; Ctrl-C cancels the work at every party and
raises ``KeyboardInterrupt``.
"""
from __future__ import annotations

import json as _json
import os as _os
from dataclasses import dataclass, field
from typing import Iterator, List, Optional


class Error(RuntimeError):
    """A failure of mpcache, with the library's message (``str(e)``, e.g.
    "invalid argument: unknown policy 'x'") and ``code``, the kind of it:
    ``invalid_argument``, ``network``, ``timeout``, ``io``, ``format``,
    ``protocol``, ``cancelled``, ``bad_party``, ``deadlock`` or ``error``.
    A service's refusal is ``invalid_argument`` and names why ("busy: ...")."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.code = code


from . import _mpcache  # noqa: E402  (after Error: the extension raises it)
from . import _paths  # noqa: E402

__all__ = ["Error", "Step", "Generation", "generate", "Token", "Completion", "TokenStream", "Client",
           "default_model"]


def default_model() -> str:
    """The bundled model folder (our byte-level Austen model): the
    installed package's, or this build's source tree's."""
    return _paths.MODEL


@dataclass(frozen=True)
class Step:
    """One step of a generation, merged across the three parties as
    ``mpcache generate`` reports it: the slowest party's latency, the
    busiest party's bytes, the rounds on the critical path."""

    phase: str              # "prefill" (which also chooses the first token) or "decode"
    step: int
    latency_s: float
    bytes_max_party: int    # payload bytes sent by the busiest party
    bytes_total: int        # by all parties together
    rounds: int             # on the critical path
    token: Optional[int]    # the token the step chose (the client's)
    text: str               # the text that token adds
    row: dict = field(repr=False, compare=False, default_factory=dict)  # the whole JSON row


@dataclass(frozen=True)
class Generation:
    """What ``mpcache.generate`` returns: what the client learned, and the costs."""

    text: str
    tokens: List[int]
    end: str                  # "budget" (all tokens) or "eos" (the model ended its text)
    prompt_tokens: List[int]
    steps: List[Step]
    summary: dict             # the summary row of ``mpcache generate --json`` (means per decoded token, ...)
    parties: List[dict]       # one row per party: peak RSS, KV cache sizes, ...
    transport: str


def _step(row: dict) -> Step:
    return Step(phase=row.get("phase", ""), step=int(row.get("step", 0)), latency_s=float(row.get("latency_s", 0.0)),
                bytes_max_party=int(row.get("bytes_max_party", 0)), bytes_total=int(row.get("bytes_total", 0)),
                rounds=int(row.get("rounds", 0)), token=row.get("token"), text=row.get("text", ""), row=row)


def generate(prompt: str, *, model: Optional[str] = None, tokens: int = 16, policy: str = "mpcache",
             budget: int = 0, protocol: str = "rss3", truncation: str = "exact", comparisons: str = "circuit",
             link: str = "none", processes: bool = True, tokenizer: str = "auto", ignore_eos: bool = False,
             insecure: bool = False, timeout_ms: int = -1) -> Generation:
    """Private greedy generation: three parties on this host continue
    ``prompt`` by at most ``tokens`` tokens (fewer if the model ends its
    text), as ``mpcache generate`` does with the same options.

    ``processes=True`` (the default) runs the parties as three ``mpcache``
    processes over loopback TCP with fresh keys and AES-GCM channels;
    ``processes=False`` runs them in this process (in-process transport).
    ``model``: a model folder (``config.json``, weights, tokenizer); default
    the bundled one. ``policy``/``budget``: the KV-cache policy;
    ``protocol``: ``rss3`` or ``add2``; ``truncation``, ``comparisons``: as
    the CLI's flags; ``link``: an emulated link (``none``, ``lan``, ``wan``,
    ``RTT_MS:MBYTES_PER_S``). The GIL is released while the parties run;
    Ctrl-C cancels them and raises ``KeyboardInterrupt``. Raises
    :class:`Error` naming what went wrong."""
    if not isinstance(prompt, str):
        raise TypeError("prompt must be a str")
    report = _json.loads(_mpcache.generate(
        prompt=prompt, model=model or _paths.MODEL, tokens=int(tokens), policy=policy, budget=int(budget),
        protocol=protocol, truncation=truncation, comparisons=comparisons, link=link, processes=bool(processes),
        tokenizer=tokenizer, ignore_eos=bool(ignore_eos), insecure=bool(insecure), timeout_ms=int(timeout_ms),
        cli=_paths.CLI))
    return Generation(text=report["text"], tokens=list(report["tokens"]), end=report["end"],
                      prompt_tokens=list(report["prompt_tokens"]), steps=[_step(r) for r in report["steps"]],
                      summary=report["summary"], parties=list(report["parties"]), transport=report["transport"])


@dataclass(frozen=True)
class Token:
    """A token the service chose, with the text it adds (``""`` for an end
    of sequence, or for bytes held back until a character is whole). A last
    Token with ``id == -1`` may follow the others: the bytes of a character
    that never completed, as U+FFFD."""

    id: int
    text: str


@dataclass(frozen=True)
class Completion:
    """What a service's client learned from one request."""

    text: str
    tokens: List[int]
    end: str                        # "budget" or "eos"
    session: int                    # the servers' number for the session
    seconds_to_accept: float        # request sent -> every server accepted (includes queueing)
    seconds_to_first_token: float
    token_seconds: List[float]      # each token after the first: time since the one before
    attempts: int = 1               # requests sent: 1 + the retries it took (Client's retries)
    retries: List[str] = field(default_factory=list)  # why each retry was made (and what it did not repeat)


def _completion(report: dict) -> Completion:
    return Completion(text=report["text"], tokens=list(report["tokens"]), end=report["end"],
                      session=int(report["session"]), seconds_to_accept=float(report["seconds_to_accept"]),
                      seconds_to_first_token=float(report["seconds_to_first_token"]),
                      token_seconds=list(report["token_seconds"]), attempts=int(report.get("attempts", 1)),
                      retries=list(report.get("retries", [])))


class TokenStream:
    """The tokens of one request as the servers choose them: iterate it for
    :class:`Token` objects. ``close()`` (or leaving a ``with`` block, or
    dropping the stream) ends the session at all three servers. Once the
    iteration has ended, ``completion`` holds the whole :class:`Completion`."""

    _END = object()

    def __init__(self, handle) -> None:
        self._handle = handle
        self._closed = False
        self.completion: Optional[Completion] = None

    def __iter__(self) -> Iterator[Token]:
        return self

    def __next__(self) -> Token:
        item = self.next_token()
        if item is None:
            raise StopIteration
        return item

    def next_token(self, timeout: Optional[float] = None):
        """The next :class:`Token`; ``None`` at the end; the string
        ``"timeout"`` when ``timeout`` seconds passed without one. Waits
        without the GIL."""
        if self._closed:
            return None
        item = self._handle.next(-1.0 if timeout is None else max(0.0, float(timeout)))
        if item is None:
            self.completion = _completion(_json.loads(self._handle.report()))
            self._closed = True
            return None
        if isinstance(item, str):
            return item
        token_id, piece = item
        if token_id == 0xFFFFFFFF:  # the bytes of a character that never completed
            return Token(id=-1, text=piece.decode("utf-8", "replace"))
        return Token(id=int(token_id), text=piece.decode("utf-8", "replace"))

    def close(self) -> None:
        """Ends the request if it still runs (its session ends at every
        server) and waits for the stream's thread."""
        if not self._closed:
            self._closed = True
            self._handle.cancel()

    def __enter__(self) -> "TokenStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Client:
    """A client of a private inference service (three ``mpcache serve``
    processes): it secret-shares its prompt to the servers and reconstructs
    each token from their parts; no single server learns either.

    ``servers``: the servers' ``cluster.json`` (host, client_port and
    public_key of each); ``key``: this client's ``NAME.key`` (``NAME.pub``
    beside it, from ``mpcache keygen --client NAME``); ``model``: the model
    folder, of which the client reads only ``config.json`` and the
    tokenizer. ``timeout_ms``: connecting, and how long a server may stay
    silent. ``retries``: a request that failed because of the service (a
    server lost or unreachable, busy, shutting down) is sent again up to
    this many times, ``retry_wait_ms`` apart; tokens already streamed are
    not streamed again (docs/serving.md, "Retries"). Files are read now: a
    bad path is an :class:`Error` here."""

    def __init__(self, servers: str, key: str, model: Optional[str] = None, *, tokenizer: str = "auto",
                 timeout_ms: int = 60000, retries: int = 0, retry_wait_ms: int = 1000) -> None:
        self.servers, self.key, self.model = servers, key, model or _paths.MODEL
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self._client = _mpcache.Client(servers=servers, key=key, model=self.model, tokenizer=tokenizer,
                                       timeout_ms=int(timeout_ms), retries=int(retries),
                                       retry_wait_ms=int(retry_wait_ms))

    def stream(self, prompt: str, *, tokens: int = 16, policy: str = "mpcache", budget: int = 0,
               ignore_eos: bool = False, temperature: float = 0.0, seed: Optional[int] = None,
               speculate: int = 0, draft: str = "lookup", _fault: str = "") -> TokenStream:
        """Starts a request; its tokens come as they are chosen (see
        :class:`TokenStream`). Connects and runs on a thread of its own.

        ``temperature`` 0 decodes greedily. Above 0 each token is sampled
        from softmax(logits / temperature) by the Gumbel-max trick: this
        client draws temperature x Gumbel(0, 1) noise for every token and
        vocabulary entry from ``seed`` (None: a random one), secret-shares
        it, and the servers take the argmax of logits plus noise, learning
        neither. The same seed gives the same tokens.

        ``speculate`` K > 0 (greedy only): each decode step verifies up to K
        tokens this client drafts with ``draft`` (``"lookup"`` or
        ``"ngram:FILE"``); the text is the same, the servers learn how many
        each step accepted (docs/serving.md, "Speculation")."""
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a str")
        if seed is None:
            seed = int.from_bytes(_os.urandom(8), "little")
        if not 0 <= int(speculate) <= 16:
            raise ValueError("speculate must be in 0..16 (drafted tokens a step)")
        return TokenStream(self._client.stream(prompt=prompt, tokens=int(tokens), policy=policy, budget=int(budget),
                                               ignore_eos=bool(ignore_eos), temperature=float(temperature),
                                               seed=int(seed) & 0xFFFFFFFFFFFFFFFF, fault=_fault,
                                               speculate=int(speculate), draft=str(draft)))

    def generate(self, prompt: str, *, tokens: int = 16, policy: str = "mpcache", budget: int = 0,
                 ignore_eos: bool = False, temperature: float = 0.0, seed: Optional[int] = None,
                 speculate: int = 0, draft: str = "lookup") -> Completion:
        """One request, to its end: the :class:`Completion` (see :meth:`stream`)."""
        with self.stream(prompt, tokens=tokens, policy=policy, budget=budget, ignore_eos=ignore_eos,
                         temperature=temperature, seed=seed, speculate=speculate, draft=draft) as s:
            for _ in s:
                pass
            assert s.completion is not None
            return s.completion

    def encode(self, text: str) -> List[int]:
        """The prompt's token ids under this client's tokenizer."""
        return list(self._client.encode(text))

    @property
    def eos_ids(self) -> List[int]:
        """The tokenizer's end-of-sequence ids."""
        return list(self._client.eos_ids())

    @property
    def max_positions(self) -> int:
        """The model's positions: prompt and new tokens together fit in them."""
        return int(self._client.max_positions())

    @property
    def tokenizer_name(self) -> str:
        return str(self._client.tokenizer_name())
