"""Per-request metrics from raw records, and one cell x level's records reduced to arrays (ms).

Per request (ok = HTTP 200, no error, a first content chunk):

- TTFT = ``ttft_ns``; E2E = ``e2e_ns``;
- tokens = ``usage_completion_tokens`` when the server reported it and it can be true, else ``client_tokens``
  (a usage count that is implausible, below the client's content events or above the tokens asked is flagged:
  ``kit.files.bounds``; the driver's own flag in ``usage_flag`` counts too);
- TPOT = (E2E - TTFT) / (tokens - 1), only when tokens > 1;
- ITL = every gap between consecutive content chunks (pooled over requests: the ITL mean is
  sum(last chunk - first chunk) / sum(chunks - 1)).

Timed-out requests are failures (counted in ``errors``) and are also censored into the latency matrix: their
rows follow the ok rows, with E2E at the time the client gave up (the timeout), TTFT at the first chunk or, when
none came, at that same time, and TPOT/ITL from the chunks that did arrive; ``ok`` counts only the ok rows.

Records are plain dicts on this hot path (``kit.files.records.Record`` documents their fields); a record
read from a file is not trusted to have them all.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from kit.files.bounds import usage_count, usage_problem
from kit.stats.metrics import C_E2E, C_ITL_SUM, C_TOKENS, C_TPOT, C_TPOT_OK, C_TTFT, N_COLS, FArray
from kit.stats.shapes import ErrorReason

RecordLike = Mapping[str, object]


@dataclass(frozen=True)
class RequestMetrics:
    ttft_ms: float
    tpot_ms: float | None
    itl_ms: list[float]
    e2e_ms: float
    tokens: int


def is_ok(rec: RecordLike) -> bool:
    return rec.get("status") == 200 and rec.get("error") is None and rec.get("ttft_ns") is not None


def client_tokens(rec: RecordLike) -> int:
    """The client's count of content events (``client_tokens``, else the length of ``chunk_ns``)."""
    client = rec.get("client_tokens")
    return client if isinstance(client, int) and not isinstance(client, bool) else len(_chunks(rec))


def _read_usage(rec: RecordLike, wanted: int | None) -> tuple[int, bool, int | None, int]:
    """(the output tokens counted, whether the usage count is not believed, the server's count, the client's) of
    one record that asked for ``wanted`` tokens (``asked``): ``output_tokens``' and ``usage_flagged``'s one
    reading, which ``reduce_records`` makes once per record."""
    client = client_tokens(rec)
    said = rec.get("usage_completion_tokens")
    reported = usage_count(said)
    flag = rec.get("usage_flag")
    bad = (isinstance(flag, str) and bool(flag)) or usage_problem(said, client, wanted) is not None
    return (reported if reported is not None and not bad else client), bad, reported, client


def usage_flagged(rec: RecordLike, requested: int | None = None) -> bool:
    """The record's usage count is not believed: flagged by the driver, or implausible or contradicted here
    (against the record's own max_tokens, else ``requested``: the tokens asked, None when unknown)."""
    return _read_usage(rec, asked(rec, requested))[1]


def asked(rec: RecordLike, requested: int | None = None) -> int | None:
    """The output tokens this request asked for: the record's own ``max_tokens`` (a dataset workload's per-request
    length, written by the load generator) when it is a plausible count, else ``requested`` (the manifest's
    ``load.output_tokens``; records before datasets carry none)."""
    own = usage_count(rec.get("max_tokens"))
    return own if own is not None and own > 0 else requested


def output_tokens(rec: RecordLike, requested: int | None = None) -> int:
    """The server's count (``usage_completion_tokens``) when present and not flagged, else the client's count."""
    return _read_usage(rec, asked(rec, requested))[0]


def tpot_ns(ttft: float, e2e: float, tokens: int) -> float | None:
    return (e2e - ttft) / (tokens - 1) if tokens > 1 else None


def _chunks(rec: RecordLike) -> list[int]:
    chunks = rec.get("chunk_ns") or []
    return chunks if isinstance(chunks, list) else list(chunks)  # type: ignore[call-overload]


def _float(rec: RecordLike, key: str) -> float:
    return float(rec[key])  # type: ignore[arg-type]  # malformed values raise, and the caller names the file


def request_metrics(rec: RecordLike, requested: int | None = None) -> RequestMetrics | None:
    """One ok request's metrics in ms (None for a request that is not ok)."""
    if not is_ok(rec):
        return None
    ttft, e2e, tokens = _float(rec, "ttft_ns"), _float(rec, "e2e_ns"), output_tokens(rec, asked(rec, requested))
    chunks = [float(c) for c in _chunks(rec)]
    tpot = tpot_ns(ttft, e2e, tokens)
    return RequestMetrics(
        ttft_ms=ttft / 1e6,
        tpot_ms=None if tpot is None else tpot / 1e6,
        itl_ms=[(b - a) / 1e6 for a, b in itertools.pairwise(chunks)],
        e2e_ms=e2e / 1e6,
        tokens=tokens,
    )


@dataclass(frozen=True)
class LevelRecords:
    """The records of one cell at one level, reduced to arrays (ms)."""

    matrix: FArray  # (ok requests, N_COLS)
    gaps: FArray  # every inter-chunk gap of the ok requests
    requests: int
    errors: int
    error_reasons: list[ErrorReason]
    wall_s: float | None
    tokens_mismatch: int
    unparsable_lines: int
    censored: int = 0  # timed-out requests: the last rows of ``matrix``
    usage: FArray | None = None  # per ok request: the server's usage.completion_tokens (NaN: not reported, flagged)
    usage_flagged: int = 0  # ok requests whose usage count is not believed (``usage_flagged``)
    asked: FArray | None = None  # per ok request: the output tokens it asked for (``asked``; NaN: unknown)

    @property
    def ok(self) -> int:
        return int(self.matrix.shape[0]) - self.censored

    @property
    def output_tokens(self) -> float:
        return float(self.matrix[: self.ok, C_TOKENS].sum())

    def column(self, col: int) -> FArray:
        return self.matrix[:, col]

    def short(self, requested: int | None) -> int:
        """Ok requests whose server said it returned fewer output tokens than each asked for (its record's
        ``max_tokens``, else ``requested``; None: nothing was asked for). Only the server's usage counts: a
        client's count of content events is below the tokens whenever a server streams several tokens per event,
        so without usage nothing is called short."""
        if self.usage is None:
            return 0
        asked = np.full(self.usage.shape, np.nan if requested is None else float(requested))
        if self.asked is not None and self.asked.shape == self.usage.shape:  # a record's own max_tokens first
            asked = np.where(np.isnan(self.asked), asked, self.asked)
        return int((self.usage < asked).sum())  # ok requests only; NaN (no usage, nothing asked) compares False

    def tpot(self) -> FArray:
        m = self.matrix
        out: FArray = m[m[:, C_TPOT_OK] > 0, C_TPOT]
        return out


def reduce_records(records: Iterable[RecordLike], unparsable: int = 0, requested: int | None = None) -> LevelRecords:
    """Per-request metrics of many records, vectorised: chunk lists are flattened once for the ITL gaps;
    ``requested``: the output tokens each request asked for (None: unknown), for the usage check."""
    rows: list[tuple[float, ...]] = []
    usage: list[float] = []
    wants: list[float] = []
    censored: list[tuple[float, ...]] = []
    flat: list[int] = []
    lengths: list[int] = []
    errors: Counter[str] = Counter()
    starts: list[float] = []
    ends: list[float] = []
    mismatch = total = flagged = 0
    for rec in records:
        total += 1
        ws, e2e = rec.get("wall_start"), rec.get("e2e_ns")
        if isinstance(ws, (int, float)):
            starts.append(float(ws))
            ends.append(float(ws) + (float(e2e) / 1e9 if isinstance(e2e, (int, float)) else 0.0))
        if not is_ok(rec):
            errors[_error_reason(rec)] += 1
            row = _censored_row(rec)
            if row is not None:
                censored.append(row)
            continue
        wanted = asked(rec, requested)
        ttft, e2e_f = _float(rec, "ttft_ns"), _float(rec, "e2e_ns")
        tokens, bad, reported, client = _read_usage(rec, wanted)  # output_tokens and usage_flagged, read once
        chunks = _chunks(rec)
        flagged += bad
        if reported is not None and reported != client:
            mismatch += 1
        tpot = tpot_ns(ttft, e2e_f, tokens)
        n = len(chunks)
        itl_sum = float(chunks[-1] - chunks[0]) if n > 1 else 0.0
        rows.append((ttft, e2e_f, tpot or 0.0, 0.0 if tpot is None else 1.0, itl_sum, max(n - 1, 0), tokens, 1.0))
        usage.append(math.nan if reported is None or bad else float(reported))
        wants.append(math.nan if wanted is None else float(wanted))
        if n:
            flat.extend(chunks)
            lengths.append(n)
    matrix = np.array(rows + censored, dtype=np.float64).reshape(-1, N_COLS)
    for col in (C_TTFT, C_E2E, C_TPOT, C_ITL_SUM):
        matrix[:, col] /= 1e6
    top = sorted(errors.items(), key=lambda x: (-x[1], x[0]))[:5]
    return LevelRecords(
        matrix=matrix,
        gaps=_gaps_ms(flat, lengths),
        usage=np.array(usage, dtype=np.float64),
        asked=np.array(wants, dtype=np.float64),
        requests=total,
        errors=sum(errors.values()),
        error_reasons=[{"reason": r, "count": c} for r, c in top],
        wall_s=(max(ends) - min(starts)) if starts else None,
        tokens_mismatch=mismatch,
        unparsable_lines=unparsable,
        censored=len(censored),
        usage_flagged=flagged,
    )


def _censored_row(rec: RecordLike) -> tuple[float, ...] | None:
    """A timed-out request's matrix row (ns), censored at the time the client gave up; None for other failures."""
    error = rec.get("error")
    e2e = rec.get("e2e_ns")
    if not (isinstance(error, str) and error.startswith("timeout")) or not isinstance(e2e, (int, float)):
        return None
    chunks = _chunks(rec)
    ttft = float(chunks[0]) if chunks else float(e2e)
    n = len(chunks)
    # TPOT from the chunks that arrived (first to last), not up to the moment the client gave up: the wait after
    # the last chunk is not a token's time, and counting it made the arm with timeouts look slower (+0.8 % at 5 %
    # timeouts, +2 % at 15 %, in tests/stats' simulation).
    tpot = tpot_ns(ttft, float(chunks[-1]), n) if n > 1 else None
    itl_sum = float(chunks[-1] - chunks[0]) if n > 1 else 0.0
    return (ttft, float(e2e), tpot or 0.0, 0.0 if tpot is None else 1.0, itl_sum, max(n - 1, 0), n, 1.0)


def _error_reason(rec: RecordLike) -> str:
    if rec.get("error") is not None:
        return str(rec["error"])[:160]
    if rec.get("status") != 200:
        return f"http {rec.get('status')}"
    return "no content chunk"


def _gaps_ms(flat: list[int], lengths: list[int]) -> FArray:
    if not flat:
        return np.zeros(0)
    gaps = np.diff(np.fromiter(flat, dtype=np.int64, count=len(flat)))
    boundaries = np.cumsum(np.asarray(lengths[:-1], dtype=np.int64)) - 1  # last chunk of j -> first of j+1
    keep = np.ones(gaps.shape[0], dtype=bool)
    keep[boundaries] = False
    out: FArray = gaps[keep].astype(np.float64) / 1e6
    return out
