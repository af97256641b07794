"""The manifest's ``load`` section: the clients, their levels, prompts and budgets. Its own module so that
models.py stays under the size limit and the load's growth (workloads, arrivals) has a place."""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from typing_extensions import TypedDict

from kit.load.arrivals import MAX_SPAN_S, MIN_BURSTINESS
from kit.manifest.fields import DAY_S, MAX_CONCURRENCY, MAX_REQUESTS, CpuList, PositiveInt, Seed, _Model
from kit.manifest.workload import Dataset, RandomIdsSet, RandomSet, RequestOptions, most_max_tokens

TIME_LIMITED_CEILING = 1_000_000  # requests a time-limited level may send at most when requests_per_level is unset
MAX_WORKLOAD_REQUESTS = 100_000  # with load.dataset: requests (recorded + warm-up) built and tokenized per level
ARRIVAL_SEED_OFFSET = 7_919  # an open-loop schedule's seed differs from the prompts' (load.seed + level)
NUMPY_SEED_MAX = 2**32 - 1  # numpy's legacy generator (the random datasets, kit.workload.sources) takes 0 to this


Rate = Annotated[float, Field(gt=0, le=100_000)]
Requests = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]


class ArrivalFields(TypedDict):
    """One level's timing, named as ``kit.load.LevelSpec``'s fields (``Load.arrival_at``)."""

    arrival: str
    rate: float
    burstiness: float
    arrival_seed: int
    duration_s: float | None


class Arrival(_Model):
    """When requests are sent (``kit.load.arrivals``; docs/load.md): closed loop, or open loop at a rate per level."""

    process: Literal["closed", "poisson", "gamma"] = Field(
        "closed", description="closed: each level's users send back to back (levels = concurrency). poisson / gamma: "
        "open loop, request i sent at its scheduled time whether or not others finished (levels = the most in "
        "flight, the cap), at the level's rate; gaps gamma(burstiness) as vLLM's --burstiness (1: Poisson).")
    rates: list[Rate] | None = Field(
        None, max_length=64, description="Open loop: requests per second, one per level (the level's cap is its "
        "entry in levels).")
    burstiness: float = Field(1.0, ge=MIN_BURSTINESS, le=1000, description="gamma only: the gaps' shape (CV = "
                              "1/sqrt(b)); < 1 burstier, > 1 more regular; at least 0.01 (below, gaps underflow to 0).")
    duration_s: float | None = Field(
        None, gt=0, le=86_400, description="Time-limited levels: no request is sent after this many seconds of the "
        "level (requests_per_level is then a ceiling; open loop sends rate x duration_s).")
    window: Literal["all", "steady"] = Field(
        "all", description="steady: the statistics keep only requests sent inside the window, after the ramp and "
        "up to the last send, whatever their outcome (selected on send time, never on latency; each is measured to "
        "its end); closed-loop users' first requests are spread over one warm-up request time. all: every "
        "recorded request.")

    @model_validator(mode="after")
    def _consistent(self) -> Arrival:
        if self.process == "closed" and self.rates is not None:
            raise ValueError("arrival.rates is for an open-loop process (poisson, gamma); closed loop has none")
        if self.process != "closed" and self.rates is None:
            raise ValueError(f"arrival process {self.process} needs arrival.rates (requests/s, one per level)")
        if self.process == "poisson" and self.burstiness != 1.0:
            raise ValueError("a poisson process has burstiness 1; use process gamma for another burstiness")
        return self


class Load(_Model):
    """The load: streaming clients at fixed levels, closed loop (concurrency) or open loop (a rate, capped)."""

    endpoint: Literal["chat", "completions"] = "chat"
    levels: list[PositiveInt] = Field(min_length=1, max_length=64, description="Concurrency levels, ascending (each at "
                                f"most {MAX_CONCURRENCY:,}).")
    requests_per_level: Requests | list[Requests] | None = Field(
        None,
        description="Recorded requests per level: one number for every level, or a list with one entry per "
        "level (default: max(5 x concurrency, 50)). Never fewer than the level's concurrency; at most "
        f"{MAX_REQUESTS:,}.",
    )
    warmup_requests: Annotated[int, Field(ge=0, le=MAX_REQUESTS)] | None = Field(
        None, description="Unrecorded requests before each level (default: the level's concurrency; at most "
        f"{MAX_REQUESTS:,})."
    )
    prompt_tokens: PositiveInt = Field(128, le=1_000_000)
    output_tokens: PositiveInt = Field(128, le=1_000_000)
    seed: Seed = Field(0, description="Seeds the prompts, a dataset's draws and the open-loop schedules (a 64-bit "
                       "signed integer; 0 to 4294967295 less the top level with a random or random-ids dataset).")
    request_timeout_s: float = Field(600.0, gt=0, le=DAY_S, description="Seconds one request may take before it "
                                     f"is recorded as failed (at most {DAY_S}, a day).")
    processes: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        "auto", description="Load processes per level; 'auto' spreads large levels over free cores."
    )
    cpus: CpuList | None = Field(
        None, description="CPUs the load processes run on, as a Linux CPU list ('8-15'); processes 'auto' then "
        "counts these. Default: the CPUs kit itself may use.",
    )
    arrival: Arrival = Field(default_factory=Arrival, description="When requests are sent (kit.load.arrivals).")
    dialect: Literal["sglang", "transformers"] = Field(
        "sglang",
        description="How each request asks for exactly output_tokens tokens and for usage. sglang (also vLLM and "
        "kit's engine): ignore_eos and stream_options.include_usage; transformers (`transformers serve`, which "
        "rejects ignore_eos): generation_config '{\"eos_token_id\": -1}'. Streams end at [DONE] or, without "
        "one, at the end of the body after a finish_reason.",
    )
    # -- workload (kit.manifest.workload): what each request carries and how it is sent --
    dataset: Dataset | None = Field(
        None, description="Where prompts come from (kit.workload builds every request before the level). None: the "
        "legacy prompts of prompt_tokens words from a 256-word list (not tokens).")
    tokenizer: str | None = Field(
        None, min_length=1, max_length=4096, description="How prompts are counted: a directory with the Hugging "
        "Face tokenizer (default: model.path), or 'words' (one token per whitespace-separated word: kit's engine).")
    request: RequestOptions = Field(default_factory=RequestOptions)

    @field_validator("levels")
    @classmethod
    def _ascending(cls, v: list[int]) -> list[int]:
        for a, b in itertools.pairwise(v):
            if b <= a:
                raise ValueError(f"levels must be strictly ascending without duplicates; {b} follows {a}")
        return v

    @model_validator(mode="after")
    def _budgets(self) -> Load:
        r = self.requests_per_level
        if isinstance(r, list) and len(r) != len(self.levels):
            raise ValueError(f"requests_per_level has {len(r)} entries but there are {len(self.levels)} levels")
        rates = self.arrival.rates
        if rates is not None and len(rates) != len(self.levels):
            raise ValueError(f"arrival.rates has {len(rates)} entries but there are {len(self.levels)} levels")
        for i, level in enumerate(self.levels):
            n = self.requests_at(level)
            if self.arrival.process == "closed" and n < level:
                raise ValueError(f"level {level} would get only {n} requests: fewer than its "
                                 "concurrency, so not every user would send one")
            if (rate := self.rate_at(level)) is not None:
                self._open_loop_level(i, level, n, rate)
            if level > MAX_CONCURRENCY:  # after the open-loop rule, whose message says why a cap above n is refused
                raise ValueError(f"load.levels[{i}] = {level}: over {MAX_CONCURRENCY:,} users (closed loop) or "
                                 "requests in flight (open loop) in one level")
            if self.dataset is not None:
                self._workload_level(level, n)
        return self

    def _open_loop_level(self, i: int, level: int, n: int, rate: float) -> None:
        if n / rate > MAX_SPAN_S:
            raise ValueError(f"load.arrival.rates[{i}] = {rate:g}: its {n} requests would take {n / rate:.3g} s "
                             f"(over {MAX_SPAN_S:g} s, one day); raise the rate or lower requests_per_level")
        if level > n:
            raise ValueError(f"load.levels[{i}] = {level}: an open-loop cap above the {n} requests the level "
                             f"schedules can never bind (and would start {level} users); give at most {n}")

    def _workload_level(self, level: int, n: int) -> None:
        if isinstance(self.dataset, (RandomSet, RandomIdsSet)) and not 0 <= self.seed <= NUMPY_SEED_MAX - level:
            raise ValueError(f"load.seed {self.seed}: the {self.dataset.kind} dataset seeds numpy's legacy generator "
                             f"with load.seed + the level, which must lie in 0 to {NUMPY_SEED_MAX}: give a seed from "
                             f"0 to {NUMPY_SEED_MAX - self.levels[-1]}")
        if self.arrival.duration_s is not None and self.arrival.process == "closed" \
                and self.requests_per_level is None:
            raise ValueError("load.requests_per_level: a time-limited closed-loop level with load.dataset needs it "
                             "(the workload builds every request before the level; the default ceiling would be "
                             f"{TIME_LIMITED_CEILING:,} prompts): give the most the level may send")
        if n + self.warmup_at(level) > MAX_WORKLOAD_REQUESTS:
            raise ValueError(f"level {level}: {n} requests and {self.warmup_at(level)} warm-up requests with "
                             f"load.dataset, over {MAX_WORKLOAD_REQUESTS:,} built per level; lower "
                             "requests_per_level (or duration_s x rate)")

    def requests_at(self, level: int) -> int:
        """The level's request budget; a time-limited level's ceiling (default: one million)."""
        r = self.requests_per_level
        if isinstance(r, list):
            r = r[self.levels.index(level)]
        duration, rate = self.arrival.duration_s, self.rate_at(level)
        if duration is not None:
            ceiling = r or TIME_LIMITED_CEILING
            return ceiling if rate is None else min(ceiling, max(1, math.ceil(rate * duration)))
        return r or max(5 * level, 50)

    def most_max_tokens(self) -> int:
        """The largest max_tokens any request of this load can ask (the bound on a record's size, kit.files.bounds)."""
        return most_max_tokens(self.dataset, self.output_tokens)

    def rate_at(self, level: int) -> float | None:
        """The level's request rate (open loop), None in a closed loop."""
        rates = self.arrival.rates
        return None if rates is None else rates[self.levels.index(level)]

    def warmup_at(self, level: int) -> int:
        return level if self.warmup_requests is None else self.warmup_requests

    def arrival_seed_at(self, level: int) -> int:
        """The seed of the level's open-loop schedule (kit.load.arrivals), from the signed manifest alone."""
        return self.seed + level + ARRIVAL_SEED_OFFSET

    def arrival_at(self, level: int) -> ArrivalFields:
        """The level's timing as ``kit.load.LevelSpec`` fields (arrival, rate, burstiness, arrival_seed, duration_s):
        what ``kit run`` gives the load and what ``kit verify`` rebuilds the schedule from."""
        return {"arrival": self.arrival.process, "rate": self.rate_at(level) or 0.0,
                "burstiness": self.arrival.burstiness, "arrival_seed": self.arrival_seed_at(level),
                "duration_s": self.arrival.duration_s}
