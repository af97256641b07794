"""Field types the manifest's sections share: names of environment variables, ports, image references, CPU lists.
Their own module so that each section's module (models, load, design, ...) can use them without importing models."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from kit.plumbing.affinity import format_cpulist, parse_cpulist


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


# Upper bounds on the manifest's numbers that no real experiment comes near but that keep each one finite and its
# run's length sane (1e30 validated, and `kit plan` estimated 2.8e29 minutes): one place, named in the descriptions.
DAY_S = 86_400  # a timeout or deadline in seconds: at most a day
MAX_REQUESTS = 10_000_000  # requests (recorded or warm-up) of one level
MAX_CONCURRENCY = 100_000  # a level's users (closed loop) or cap on requests in flight (open loop)
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # a seed: any 64-bit signed integer


ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
_REPO = r"(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_REF_RE = rf"^(?:{_REPO}(?::{_TAG})?(?:@sha256:[a-f0-9]{{64}})?|sha256:[a-f0-9]{{64}})$"
PINNED_RE = re.compile(rf"^(?:{_REPO}(?::{_TAG})?@sha256:[a-f0-9]{{64}}|sha256:[a-f0-9]{{64}})$")

EnvName = Annotated[str, Field(pattern=ENV_NAME_RE)]
Port = Annotated[int, Field(ge=1, le=65535)]
PositiveInt = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]
Env = dict[Annotated[str, Field(pattern=ENV_NAME_RE)], str]


def _cpulist(v: str) -> str:
    return format_cpulist(parse_cpulist(v))  # checked, and spelled as the kernel spells it


CpuList = Annotated[str, Field(max_length=4096, pattern=r"^[0-9][0-9,\- ]*$"), AfterValidator(_cpulist)]
