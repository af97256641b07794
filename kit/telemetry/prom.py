"""One bounded scrape of a server's Prometheus ``/metrics``, parsed by prometheus_client's own text parser.

Bounded end to end: the GET (headers and body) gets ``timeout_s`` in all (a watchdog shuts the socket at the
deadline, so a server that drips a header a byte at a time cannot hold it), the body at most ``max_bytes``, the
parser at most ``max_parsed`` samples; whatever breaks a bound or does not parse is a ``ScrapeError`` naming it,
never an exception out of the sampler.

Kept: the gauges and counters of the families kit knows (``FAMILIES``), at most ``max_series`` of them, and from
them ``ServerQuantities`` in kit's words. sglang's and vLLM's names are theirs (sglang
``python/sglang/srt/metrics/collector.py``, vLLM ``vllm/v1/metrics/loggers.py``); kit's engine's are in
``kit/engine/metrics.py``; `transformers serve` has none of its own: kit's launcher adds one
(``images/transformers/kit_hf/metrics.py``, ``kit_hf:`` names).
"""

from __future__ import annotations

import http.client
import math
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from kit.files.telemetry import ServerQuantities
from kit.plumbing.redact import redact

# quantity -> the sample names it is read from, in order of preference (the first present wins)
FAMILIES: dict[str, tuple[str, ...]] = {
    "running": ("kit_engine_requests_running", "sglang:num_running_reqs", "vllm:num_requests_running",
                "kit_hf:num_requests_running"),
    "queued": ("kit_engine_requests_waiting", "sglang:num_queue_reqs", "vllm:num_requests_waiting",
               "kit_hf:num_requests_waiting"),
    "kv_cache_usage": ("sglang:token_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                       "kit_hf:kv_cache_usage_perc"),
    "kv_tokens": ("sglang:num_used_tokens",),
    "generated_tokens": ("kit_engine_decode_tokens_total", "sglang:generation_tokens_total",
                         "vllm:generation_tokens_total", "kit_hf:generation_tokens_total"),
    "prompt_tokens": ("kit_engine_prefill_tokens_total", "sglang:prompt_tokens_total", "vllm:prompt_tokens_total",
                      "kit_hf:prompt_tokens_total"),
}
KEPT_PREFIXES = ("kit_engine_", "sglang:", "vllm:", "kit_hf:")  # families whose gauges and counters are kept as series
KEPT_TYPES = ("gauge", "counter", "unknown")  # unknown: a sample with no # TYPE line
MAX_FIELD = 200  # characters of a series key or an error kept
# Bounds on what prometheus_client is given to parse, which the byte bound alone does not make short: it parses
# one line's labels in time quadratic in their number (a review's 1.6 MiB line of 150k labels took 20 s, 3.4 MiB
# 107 s), and about 3 us a label pair otherwise (8 MiB of short lines of labels: 3 s). A line longer than MAX_LINE
# is dropped (a kept series' key is at most MAX_FIELD characters anyway); more than MAX_LABELS "=" in what is left
# (a bound on its label pairs; sglang's or vLLM's /metrics hold a few thousand) is refused: about 0.3 s of parsing.
MAX_LINE = 2 << 10
MAX_LABELS = 100_000
# And the lines themselves: prometheus_client takes about 6.5 us a sample line (a review's /metrics of 199,000 lines,
# inside every bound above: 1.3 s of CPU a scrape, 64 % of a core at one scrape a second). sglang's and vLLM's hold a
# few thousand; more than MAX_LINES lines is refused (about 0.3 s at most).
MAX_LINES = 50_000


def _short_lines(text: str) -> tuple[str, int]:
    """``text`` without its lines longer than MAX_LINE, and how many went; ScrapeError past MAX_LABELS."""
    dropped = 0
    if len(text) > MAX_LINE:
        lines = text.split("\n")
        kept = [x for x in lines if len(x) <= MAX_LINE]
        text, dropped = "\n".join(kept), len(lines) - len(kept)
    if text.count("=") > MAX_LABELS:
        raise ScrapeError(f"more than {MAX_LABELS} label pairs in one response; refused")
    if text.count("\n") > MAX_LINES:
        raise ScrapeError(f"more than {MAX_LINES} lines in one response; refused (parsing them would load the machine "
                          "kit measures)")
    return text, dropped


class ScrapeError(Exception):
    """The scrape failed or broke a bound; the message says which."""


@dataclass
class Scrape:
    quantities: ServerQuantities
    series: dict[str, float]
    sources: dict[str, str]  # quantity -> sample name it came from
    dropped: int = 0  # kept-family series beyond max_series
    elapsed_ms: float = 0.0
    parsed: int = 0
    errors: list[str] = field(default_factory=list)


def fetch(url: str, *, timeout_s: float, max_bytes: int, context: ssl.SSLContext | None = None) -> bytes:
    """The body of a 200 answer to GET ``url`` (no proxy), within ``timeout_s`` and ``max_bytes`` in all; an
    https URL is verified with ``context`` (kit.plumbing.tls)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname or (u.scheme == "https") != (context is not None):
        raise ScrapeError(f"{url}: only http:// URLs, or https:// ones with the server's TLS settings, are scraped")
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout_s) if context is None else \
        http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout_s, context=context)
    expired = threading.Event()

    def watchdog() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout_s, watchdog)
    timer.daemon = True
    timer.start()
    try:
        conn.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""),
                     headers={"Accept": "text/plain; version=0.0.4", "Accept-Encoding": "identity"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ScrapeError(f"GET {u.path} answered HTTP {resp.status}")
        body = bytearray()
        while len(body) <= max_bytes:
            chunk = resp.read1(min(1 << 16, max_bytes + 1 - len(body)))
            if not chunk:
                break
            body += chunk
        if len(body) > max_bytes:
            raise ScrapeError(f"GET {u.path}: response larger than {max_bytes} bytes; refused")
        if expired.is_set():
            raise ScrapeError(f"GET {u.path} took more than {timeout_s:g} s; refused")
        return bytes(body)
    except (OSError, http.client.HTTPException, ValueError) as e:
        if expired.is_set():
            raise ScrapeError(f"GET {u.path} took more than {timeout_s:g} s; refused") from None
        raise ScrapeError(f"GET {u.path}: {type(e).__name__}: {_short(str(e))}") from None
    finally:
        timer.cancel()
        conn.close()


def _key(name: str, labels: dict[str, str]) -> str:
    """A series' key, ``name{label="value",...}``: the name, each label's name and value masked first
    (kit.plumbing.redact: a server may put a secret in a label), then the whole key."""
    if not labels:
        return redact(name)
    inner = ",".join(f'{redact(k)}="{_escape(redact(v))}"' for k, v in sorted(labels.items()))
    return redact(f"{redact(name)}{{{inner}}}")


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _short(text: str) -> str:
    """An error's text: secrets masked, then cut (a parser's message may quote the line it stopped at)."""
    text = redact(text)
    return text if len(text) <= MAX_FIELD else text[:MAX_FIELD] + "..."


def parse(text: str, *, max_parsed: int, max_series: int) -> Scrape:
    """The kept series and kit's quantities of one exposition (prometheus_client's parser)."""
    series: dict[str, float] = {}
    by_name: dict[str, list[float]] = {}
    text, dropped = _short_lines(text)  # before the try: its ScrapeError is the caller's
    parsed = 0
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                parsed += 1
                if parsed > max_parsed:
                    raise ScrapeError(f"more than {max_parsed} samples in one response; refused")
                if fam.type not in KEPT_TYPES or not s.name.startswith(KEPT_PREFIXES):
                    continue
                value = float(s.value)
                if not math.isfinite(value):
                    continue
                key = _key(s.name, dict(s.labels))
                if len(key) > MAX_FIELD:
                    dropped += 1
                    continue
                if key not in series and len(series) >= max_series:
                    dropped += 1
                    continue
                series[key] = value
                by_name.setdefault(s.name, []).append(value)
    except ScrapeError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
        raise ScrapeError(f"not the Prometheus text format: {type(e).__name__}: {_short(str(e))}") from None
    values, sources = quantities(by_name)
    return Scrape(values, series, sources, dropped=dropped, parsed=parsed)


def all_samples(text: str, *, max_parsed: int) -> dict[str, float]:
    """Every finite sample of one exposition as ``{"name{labels}": value}`` (the before/after scrape of a level,
    ``server_metrics.json``), at most ``max_parsed`` of them."""
    out: dict[str, float] = {}
    text, _ = _short_lines(text)  # unlike parse's, no count of them is kept here
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if len(out) >= max_parsed:
                    raise ScrapeError(f"more than {max_parsed} samples in one response; refused")
                value = float(s.value)
                if math.isfinite(value):  # NaN/Inf are legal Prometheus values but not JSON
                    out[_key(s.name, dict(s.labels))] = value
    except ScrapeError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
        raise ScrapeError(f"not the Prometheus text format: {type(e).__name__}: {_short(str(e))}") from None
    return out


def quantities(by_name: dict[str, list[float]]) -> tuple[ServerQuantities, dict[str, str]]:
    """kit's quantities from the kept samples by name (the first family of ``FAMILIES`` present wins)."""
    got: dict[str, float] = {}
    sources: dict[str, str] = {}
    for quantity, names in FAMILIES.items():
        name = next((n for n in names if n in by_name), None)
        if name is None:
            continue
        values: Iterable[float] = by_name[name]
        try:
            total = max(values) if quantity == "kv_cache_usage" else math.fsum(values)
        except OverflowError:
            total = math.inf
        if not math.isfinite(total):  # finite series whose sum overflows (a hostile or broken exposition)
            raise ScrapeError(f"{name}: the sum over its label sets is not a finite number; refused")
        got[quantity] = total
        sources[quantity] = name
    return ServerQuantities(**got), sources


def scrape(url: str, *, timeout_s: float, max_bytes: int, max_parsed: int, max_series: int,
           context: ssl.SSLContext | None = None) -> Scrape:
    """Fetch and parse one exposition; ``ScrapeError`` names what went wrong."""
    t0 = time.monotonic()
    body = fetch(url, timeout_s=timeout_s, max_bytes=max_bytes, context=context)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScrapeError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    out = parse(text, max_parsed=max_parsed, max_series=max_series)
    out.elapsed_ms = (time.monotonic() - t0) * 1e3
    return out
