"""A pytest plugin that writes each test's CPU time (its process and the children it waited for) and wall time,
one JSON line per test, so that the suite's cost can be found where it is spent (make test is CPU-bound on 2 cores):

    PYTHONPATH=benchmarks KIT_TEST_CPU=/tmp/cpu.jsonl .venv/bin/python -m pytest -p pytest_cpu ...
    python benchmarks/pytest_cpu.py /tmp/cpu.jsonl        # the CPU per test file, and the 30 dearest tests

Not counted: what Docker's daemon and containers spend (not descendants), and children not yet reaped when the test
ends. With xdist each worker appends to the same file (one line per write)."""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    out = os.environ.get("KIT_TEST_CPU")
    own0, kids0 = _cpu()
    t0 = time.time()
    yield
    if out:
        own1, kids1 = _cpu()
        line = {"id": item.nodeid, "self": round(own1 - own0, 2), "children": round(kids1 - kids0, 2),
                "wall": round(time.time() - t0, 2), "start": round(t0, 2)}
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def summary(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        rows: list[dict[str, Any]] = [json.loads(x) for x in f]
    by_file: collections.Counter[str] = collections.Counter()
    for r in rows:
        by_file[r["id"].split("::")[0]] += r["self"] + r["children"]
    print(f"{len(rows)} tests, {sum(by_file.values()):.0f} s of CPU")
    for name, cpu in by_file.most_common(40):
        print(f"{cpu:8.1f} s  {name}")
    print()
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:30]:
        print(f"{r['self'] + r['children']:8.1f} s CPU {r['wall']:7.1f} s wall  {r['id'][:140]}")


if __name__ == "__main__":
    summary(sys.argv[1])
