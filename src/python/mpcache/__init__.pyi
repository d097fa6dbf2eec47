# Type stubs of the package mpcache (src/python/mpcache/__init__.py says what each does).
from typing import Iterator, List, Optional, Union

class Error(RuntimeError):
    code: str
    def __init__(self, message: str, code: str = ...) -> None: ...

def default_model() -> str: ...

class Step:
    phase: str
    step: int
    latency_s: float
    bytes_max_party: int
    bytes_total: int
    rounds: int
    token: Optional[int]
    text: str
    row: dict

class Generation:
    text: str
    tokens: List[int]
    end: str
    prompt_tokens: List[int]
    steps: List[Step]
    summary: dict
    parties: List[dict]
    transport: str

def generate(prompt: str, *, model: Optional[str] = ..., tokens: int = ..., policy: str = ..., budget: int = ...,
             protocol: str = ..., truncation: str = ..., comparisons: str = ..., link: str = ...,
             processes: bool = ..., tokenizer: str = ..., ignore_eos: bool = ..., insecure: bool = ...,
             timeout_ms: int = ...) -> Generation: ...

class Token:
    id: int
    text: str

class Completion:
    text: str
    tokens: List[int]
    end: str
    session: int
    seconds_to_accept: float
    seconds_to_first_token: float
    token_seconds: List[float]
    attempts: int
    retries: List[str]

class TokenStream(Iterator[Token]):
    completion: Optional[Completion]
    def __iter__(self) -> TokenStream: ...
    def __next__(self) -> Token: ...
    def next_token(self, timeout: Optional[float] = ...) -> Union[Token, str, None]: ...
    def close(self) -> None: ...
    def __enter__(self) -> TokenStream: ...
    def __exit__(self, *exc: object) -> None: ...

class Client:
    servers: str
    key: str
    model: str
    def __init__(self, servers: str, key: str, model: Optional[str] = ..., *, tokenizer: str = ...,
                 timeout_ms: int = ..., retries: int = ..., retry_wait_ms: int = ...) -> None: ...
    def stream(self, prompt: str, *, tokens: int = ..., policy: str = ..., budget: int = ...,
               ignore_eos: bool = ..., temperature: float = ..., seed: Optional[int] = ...) -> TokenStream: ...
    def generate(self, prompt: str, *, tokens: int = ..., policy: str = ..., budget: int = ...,
                 ignore_eos: bool = ..., temperature: float = ..., seed: Optional[int] = ...) -> Completion: ...
    def encode(self, text: str) -> List[int]: ...
    @property
    def eos_ids(self) -> List[int]: ...
    @property
    def max_positions(self) -> int: ...
    @property
    def tokenizer_name(self) -> str: ...
