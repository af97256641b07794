"""The manifest's workload fields: what each request carries (``load.dataset``, ``load.tokenizer``) and how it
is sent (``load.request``). Their own module so that ``load.py`` only names them; ``kit.workload`` builds the
per-request list from them before a level starts, and the driver sends exactly that list."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from kit.manifest.fields import EnvName, Seed, _Model
from kit.plumbing.files import TooLarge, read_bounded, sha256_file

Sha256 = Annotated[str, Field(pattern=r"^[a-f0-9]{64}$")]
MAX_TOKENS = 1_000_000  # the most tokens any length field, and so any request's max_tokens, may ask
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
HeaderName = Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,64}$")]
RESERVED_BODY = ("model", "messages", "prompt", "max_tokens", "stream", "stream_options", "ignore_eos",
                 "generation_config", "temperature", "top_p", "seed")
RESERVED_HEADERS = ("host", "content-type", "content-length", "accept", "accept-encoding", "user-agent",
                    "x-request-id", "connection", "transfer-encoding")


class DatasetFile(_Model):
    """A data file, pinned: kit refuses to run when its bytes do not hash to ``sha256``."""

    path: str = Field(min_length=1, max_length=4096,
                      description="The file, relative to kit's working directory (like model.path).")
    sha256: Sha256 = Field(description="sha256 of the file's bytes (`sha256sum FILE`); signed with the manifest.")


class CaBundle(DatasetFile):
    """https: a PEM file of CA certificates (public: never a private key), pinned like a data file."""

    def resolved(self) -> str:
        """The file as every process of kit's opens it (absolute: the load drivers run elsewhere)."""
        return str(Path(self.path).expanduser().resolve())


MAX_CA_BYTES = 4 << 20
MAX_TEXT_BYTES = 64 << 20  # a text that is tokenized whole (text, random, shared-prefix, multi-turn)
MAX_PINNED_BYTES = 1 << 30  # a data file of records (sharegpt, jsonl; ShareGPT_V3's ~670 MB fits): the most any
# dataset kind reads. kit.workload.corpus reads files by these bounds (its MAX_DATA_BYTES is this one), preflight
# (kit.manifest.runnable) checks them by ``dataset_file_bound``.
PIN_HINT = ("paths are relative to where kit runs; a file that changed since the manifest was signed must be "
            "restored, or re-pinned (sha256sum FILE) and signed again")


class Problem(str):
    """Why a pinned file cannot be used (the message), with what to do about it (``hint``)."""

    hint: str

    def __new__(cls, text: str, hint: str = PIN_HINT) -> Problem:
        self = super().__new__(cls, text)
        self.hint = hint
        return self


def ca_problem(f: CaBundle) -> str | None:
    """Why the pinned CA file cannot verify a server here: a file_problem (over MAX_CA_BYTES among them), a private
    key in it (it would be signed into kit's inputs' provenance beside public certificates: give the CA certificate
    alone), or no certificate OpenSSL can load."""
    what = "load.request.ca_bundle"
    why = file_problem(f, what, MAX_CA_BYTES)
    if why is not None:
        return why
    try:  # the bytes hashed a moment ago, unless the file changed since: read as file_problem reads them
        data = read_bounded(Path(f.path).expanduser(), MAX_CA_BYTES)
    except (OSError, TooLarge) as exc:
        return _unreadable(f, what, exc)
    if b"PRIVATE KEY-----" in data:
        return f"{what} {f.path}: holds a private key; give the CA's certificate only (public), never a key"
    try:
        ssl.create_default_context(cadata=data.decode("ascii"))
    except (ssl.SSLError, ValueError, UnicodeDecodeError) as exc:
        return f"{what} {f.path}: not a PEM file of CA certificates OpenSSL can load ({exc})"
    return None


def file_problem(f: DatasetFile, what: str = "load.dataset.file", limit: int = MAX_PINNED_BYTES) -> Problem | None:
    """Why the pinned file cannot be used here (absent, not a regular file, over ``limit`` bytes, unreadable, other
    bytes), or None. A symbolic link is followed; a FIFO, device or directory is refused without waiting on it, and
    the size is checked before anything is read, then hashed in 1 MiB blocks never past ``limit``."""
    try:
        digest, size = sha256_file(Path(f.path).expanduser(), limit, follow=True)
    except OSError as exc:
        return _unreadable(f, what, exc)
    if size > limit:
        much = f"more than {limit}" if size == limit + 1 else str(size)  # read past the bound, or its stated size
        kinds = "; docs/workload.md, Datasets, gives each kind's bound" if what.startswith("load.dataset") else ""
        return Problem(f"{what} {f.path}: {much} bytes, over kit's {limit >> 20} MiB bound for this file",
                       hint=f"use a smaller file (at most {limit >> 20} MiB here{kinds}), then pin it (sha256sum "
                            "FILE) and sign the manifest again")
    if digest != f.sha256:
        return Problem(f"{what} {f.path}: its sha256 is {digest}, the manifest pins {f.sha256}")
    return None


def _unreadable(f: DatasetFile, what: str, exc: OSError | TooLarge) -> Problem:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).split(": ", 1)[-1]
    return Problem(f"{what} {f.path}: cannot read it ({why})")


class TextSet(_Model):
    """Token-exact prompts cut from real text: each request's message is exactly ``load.prompt_tokens`` tokens of
    ``file`` (default: the shipped corpus, kit.workload.corpus), from a window that moves with the request index."""

    kind: Literal["text"]
    file: DatasetFile | None = Field(None, description="UTF-8 text to cut prompts from (default: the shipped corpus).")


class RandomSet(_Model):
    """sglang bench_serving's `random` dataset: input and output lengths drawn uniformly from
    [max(int(input_len * range_ratio), 1), input_len] and [int(output_len * range_ratio), output_len] with numpy's
    legacy generator seeded by ``load.seed``, the text cut token-exact from ``file`` (default: the shipped corpus)."""

    kind: Literal["random"]
    input_len: Tokens = 1024
    output_len: Tokens = 1024
    range_ratio: Ratio = Field(0.0, description="sglang's --random-range-ratio (its default 0.0).")
    file: DatasetFile | None = None


class RandomIdsSet(_Model):
    """sglang bench_serving's `random-ids` (``random_sample=False``): random's lengths, and as each prompt the run of
    token ids (offset_i + i + j) mod vocab_size, j < input_len_i, offset_i drawn by the same generator after the
    lengths: random tokens, not text. Made token-exact: the ids are decoded and the text cut to exactly
    input_len_i tokens (its re-encoding merges some ids); with the 'words' tokenizer each id is the word t<id>."""

    kind: Literal["random-ids"]
    input_len: Tokens = 1024
    output_len: Tokens = 1024
    range_ratio: Ratio = Field(0.0, description="sglang's --random-range-ratio (its default 0.0).")
    vocab_size: Annotated[int, Field(ge=2, le=10_000_000)] | None = Field(
        None, description="Ids are drawn below this (default: the tokenizer's vocab_size; needed with 'words').")


class ShareGptSet(_Model):
    """ShareGPT conversations (a JSON list or JSONL of {"conversations": [{"from", "value"}, ...]}): the first turn is
    the prompt, the second's token count the output length unless ``output_len`` fixes it (sglang's semantics)."""

    kind: Literal["sharegpt"]
    file: DatasetFile
    output_len: Tokens | None = Field(None, description="Fixed max_tokens (sglang's --sharegpt-output-len).")
    context_len: Tokens | None = Field(None, description="Drop conversations with prompt + output above this.")


class JsonlSet(_Model):
    """Your own prompts: one JSON object a line, {"prompt": "..."} or {"messages": [...]}, optionally
    {"output_tokens": N} (default: load.output_tokens)."""

    kind: Literal["jsonl"]
    file: DatasetFile


class SharedPrefixSet(_Model):
    """sglang's `generated-shared-prefix`: ``groups`` system prompts of ``system_prompt_len`` tokens, each shared by
    ``prompts_per_group`` questions of ``question_len`` tokens (for prefix caching); cut from real text."""

    kind: Literal["shared-prefix"]
    groups: Annotated[int, Field(ge=1, le=4096)] = 64
    prompts_per_group: Annotated[int, Field(ge=1, le=4096)] = 16
    system_prompt_len: Tokens = 2048
    question_len: Tokens = 128
    output_len: Tokens = 256
    file: DatasetFile | None = None


class MultiTurnSet(_Model):
    """Sessions of ``turns`` requests: turn t sends the whole conversation so far (user turns of ``turn_len`` tokens,
    the assistant turns taken from the text, not from the server, so what is sent is known before the level)."""

    kind: Literal["multi-turn"]
    turns: Annotated[int, Field(ge=1, le=64)] = 4
    turn_len: Tokens = 64
    output_len: Tokens = 64
    file: DatasetFile | None = None


Dataset = Annotated[TextSet | RandomSet | RandomIdsSet | ShareGptSet | JsonlSet | SharedPrefixSet | MultiTurnSet,
                    Field(discriminator="kind")]


def dataset_file_bound(ds: Dataset) -> int:
    """The most bytes kit reads of ``ds``'s file (docs/workload.md, Datasets): 1 GiB of records (sharegpt, jsonl),
    64 MiB of a text, which is tokenized whole. Preflight checks a file by it; kit.workload reads the file by it."""
    return MAX_PINNED_BYTES if isinstance(ds, ShareGptSet | JsonlSet) else MAX_TEXT_BYTES


def most_max_tokens(ds: Dataset | None, output_tokens: int) -> int:
    """The largest max_tokens a request of this signed dataset can ask (``output_tokens``: load.output_tokens),
    from the manifest alone: a length field where the manifest fixes it; for a file's own lengths (jsonl's
    output_tokens, sharegpt's completion lengths) the most kit accepts, MAX_TOKENS (or sharegpt's context_len)."""
    if ds is None or isinstance(ds, TextSet):
        return output_tokens
    if isinstance(ds, JsonlSet):
        return MAX_TOKENS
    if isinstance(ds, ShareGptSet):
        return ds.output_len or min(ds.context_len or MAX_TOKENS, MAX_TOKENS)
    return ds.output_len



class RequestOptions(_Model):
    """Fields every request carries beside the prompt; none may replace what kit sets for a fixed length."""

    temperature: Annotated[float, Field(ge=0.0, le=10.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: Seed | None = Field(None, description="Sampling seed sent with every request (a 64-bit signed integer).")
    seed_per_request: bool = Field(False, description="Send seed + the request's index instead (needs seed).")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="More body fields, e.g. chat_template_kwargs (at most 64 KiB as JSON).")
    headers: dict[HeaderName, Annotated[str, Field(max_length=1024, pattern=r"^[\x20-\x7e]*$")]] = Field(
        default_factory=dict, description="Headers with plain values (written into the bundle).")
    header_env: dict[HeaderName, EnvName] = Field(
        default_factory=dict, description="Headers whose values are secrets, e.g. {Authorization: KIT_LOAD_AUTH}: "
        "the load process reads the named variable; the value (and the credentials after a scheme such as Bearer) "
        "is masked (***) in every bundle file, log and message, also where a server echoes it.")

    def body_fields(self) -> dict[str, Any]:
        """What every request's body gets beside kit's own fields (seed: the base when seed_per_request)."""
        out: dict[str, Any] = {k: v for k, v in (("temperature", self.temperature), ("top_p", self.top_p),
                                                       ("seed", self.seed)) if v is not None}
        return {**out, **self.extra_body}

    ca_bundle: CaBundle | None = Field(None, description="server.scheme https: the PEM file of CA certificates "
                                       "that every connection of kit's verifies the server with, pinned by sha256 "
                                       "(default: the system's CA certificates). docs/https.md.")
    verify_tls: bool = Field(True, description="server.scheme https: verify the server's certificate and name. "
                             "false accepts any certificate: recorded in the bundle and shown in the report as "
                             "unverified.")

    @field_validator("extra_body")
    @classmethod
    def _extra(cls, v: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(set(v) & set(RESERVED_BODY))
        if taken:
            raise ValueError(f"extra_body may not set {', '.join(taken)}: kit sets them (use temperature, top_p, "
                             "seed, load.output_tokens or the dataset instead)")
        try:
            text = json.dumps(v, allow_nan=False)
        except ValueError:
            raise ValueError("extra_body holds a number that is not finite (nan or infinity): JSON has none") from None
        if len(text) > 64 << 10:
            raise ValueError("extra_body is over 64 KiB as JSON")
        return v

    @model_validator(mode="after")
    def _headers(self) -> RequestOptions:
        names = [h.lower() for h in [*self.headers, *self.header_env]]
        taken = sorted({h for h in names if h in RESERVED_HEADERS})
        if taken:
            raise ValueError(f"headers may not set {', '.join(taken)}: kit sets them")
        if len(names) != len(set(names)):
            raise ValueError("a header is named twice (headers and header_env together, case-insensitive)")
        if self.seed_per_request and self.seed is None:
            raise ValueError("seed_per_request needs a seed")
        if self.ca_bundle is not None and not self.verify_tls:
            raise ValueError("ca_bundle with verify_tls: false: nothing would be verified against it; remove one")
        return self


def tls_problem(scheme: str, req: RequestOptions) -> str | None:
    """Why load.request's TLS settings do not fit server.scheme (None: they do)."""
    if scheme == "http" and (req.ca_bundle is not None or not req.verify_tls):
        return ("load.request.ca_bundle and verify_tls apply to an https server: set server.scheme: https, or "
                "remove them (accepted, they would be signed and do nothing)")
    return None


__all__ = ["MAX_TOKENS", "CaBundle", "Dataset", "DatasetFile", "JsonlSet", "MultiTurnSet", "RandomIdsSet", "RandomSet",
           "RequestOptions", "ShareGptSet", "SharedPrefixSet", "TextSet", "ca_problem", "dataset_file_bound",
           "most_max_tokens", "tls_problem"]
