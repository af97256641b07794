from __future__ import annotations

import atexit
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.ports import free_port

if TYPE_CHECKING:
    from kit.signing import SigningKey

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Reservations are host-wide (kit.runtime.lockdir): without this every kit a test starts would lock ports and GPUs
# in /run/lock/kit beside every other test session, CI job and real run on the machine. A directory of this
# process's own for module- and session-scoped fixtures (set before any of them run), and one per test below.
_BASE = os.environ["KIT_LOCK_DIR"] = tempfile.mkdtemp(prefix="kit-locks-")
atexit.register(shutil.rmtree, _BASE, True)
_LOCK_DIRS = itertools.count()
# A run's PNG plots cost about 1.1 s of CPU plus 0.13 s a cell (kit.report.plots.wanted), the larger part of a
# small run's own CPU and, over the suite's ~150 runs, minutes of `make test` on 2 cores. Off for every kit the
# tests start, unless a test is marked `plots` (those that look at them, and the shipped demo's end to end).
os.environ["KIT_PLOTS"] = "0"


@pytest.fixture(autouse=True)
def own_lock_dir(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test reserves in a lock directory of its own (not made until kit needs it): two tests running at
    once never see each other's reservations. A test that starts kit with an environment of its own passes
    KIT_LOCK_DIR on (``os.environ["KIT_LOCK_DIR"]``)."""
    path = os.path.join(_BASE, str(next(_LOCK_DIRS)))
    monkeypatch.setenv("KIT_LOCK_DIR", path)
    return path



@pytest.fixture(autouse=True)
def plots_drawn(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests marked `plots` get runs that draw their plots (KIT_PLOTS unset, kit's default)."""
    if request.node.get_closest_marker("plots") is not None:
        monkeypatch.delenv("KIT_PLOTS")


@pytest.fixture(autouse=True)
def own_secrets() -> Iterator[None]:
    """Every test ends with the secrets to redact that it began with: kit keeps one set per process
    (kit.plumbing.redact), to which every ServerSpec and run adds its own; one test's must not mask another's text."""
    from kit.plumbing.redact import secrets_added

    with secrets_added(()):
        yield


@pytest.fixture
def other_kit() -> Iterator[subprocess.Popen[bytes]]:
    """Stands for the kit process of a live run whose run lock is in another lock directory (support.kits)."""
    p = subprocess.Popen(["sleep", "600"])
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def port() -> int:
    """A port outside the ephemeral range, free now (see support.ports)."""
    return free_port()


@pytest.fixture
def runner(tmp_path: Path) -> SigningKey:
    """A fresh runner key (signs bundles' provenance) under the test's tmp dir."""
    from kit.signing import generate_key

    return generate_key(tmp_path / "keys" / "runner_ed25519", "kit-runner@testhost")


@pytest.fixture
def kit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Isolate ~/.config/kit so tests never read or write the user's keys and trust files."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    yield home


# --------------------------------------------------------------------------- parallel runs (pytest-xdist)
# `make test` runs each tier on several workers (pytest -n N --dist loadgroup). Tests that share something
# outside their own tmp_path which two processes must not use at once run in one xdist group: one worker runs
# a group's tests one after another (and makes its session fixtures once). The group is chosen here, from the
# test's marker or the fixtures it uses, so that a new test needs no mark of its own:
#   docker        every `docker`-marked test: one engine, `kit.managed` containers that the session's teardown
#                 and `kit clean` count host-wide, the leftover-container gate, images built under shared tags
#   slurm         every test that uses the one-node cluster (fixture slurm_cluster): its nodes' CPUs and queue
#   sglang-wheel  the sglang wheel downloaded once into ~/.cache/kit-test (a second download would race it)
#   hf-model      build/models/transformers-tiny-cpu in the repo (fixture shipped_model), made when missing
#   module:PATH   the tests of one module that share a module-scoped fixture (made once, as without xdist)
# A test that holds something else fixed (a port no namespace isolates, a host-wide lock) marks itself with
# @pytest.mark.xdist_group("NAME"). A test that gets a group here keeps only that one: xdist would join
# several names into a new group, which would run beside both.
EXCLUSIVE_FIXTURES = {"slurm_cluster": "slurm", "sglang_wheel": "sglang-wheel", "shipped_model": "hf-model"}


def exclusive_group(item: pytest.Item) -> str | None:
    """The xdist group a test must run in, or None where it may run beside anything."""
    if item.get_closest_marker("docker"):
        return "docker"
    names = set(getattr(item, "fixturenames", ()))
    found = next((group for fixture, group in EXCLUSIVE_FIXTURES.items() if fixture in names), None)
    return found or _module_group(item)


def _module_group(item: pytest.Item) -> str | None:
    """A module's tests that share a module-scoped fixture (an engine, a bundle, a simulation made once for the
    module) run on one worker, which makes it once, as without xdist; elsewhere each worker would make its own."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None or not any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values()):
        return None
    return "module:" + item.nodeid.split("::")[0]


@pytest.hookimpl(wrapper=True)  # around xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    for item in items:
        group = exclusive_group(item)
        if group is not None:
            item.own_markers = [m for m in item.own_markers if m.name != "xdist_group"]
            item.add_marker(pytest.mark.xdist_group(group))
    yield
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        for item in items:
            _name_the_group(item)
        items.sort(key=_start_rank)  # stable: the rest keep their order


# The longest work units first (a group's tests run one after another on one worker, so a group counts whole): the
# scheduler hands out work units in collection order (`make test` passes --no-loadscope-reorder, which would sort
# them by their number of tests), and a long one started last ran alone at the end. Measured in `make test`'s
# docker + slow + gpu tiers on 2 cores, 4 workers (2026-12-07): the until-decided reproduction (225 s; now a quiet
# test) started at 699 s and ended the tier at 929 s with one worker busy, the others done at 832-873 s. Wall
# seconds then: docker group 379 (721 in a clone on a machine without the images), hf-model about 290, the stats
# simulation group about 200, test_reproduce_e2e's module about 200, the crash test 101, the open-loop demos 140,
# the telemetry run 63.
START_FIRST = ("@docker", "@hf-model", "@stats-simulation", "test_reproduce_e2e.py",
               "test_crash_sigkill.py::test_sigkill_at_random", "test_arrivals_run.py", "test_telemetry_run.py",
               "@slurm", "test_aa_and_demo.py", "test_run.py::test_run_verify")


def _start_rank(item: pytest.Item) -> int:
    return next((i for i, part in enumerate(START_FIRST) if part in item.nodeid), len(START_FIRST))


def _name_the_group(item: pytest.Item) -> None:
    """The group in the test's id as xdist's scheduler reads it ("ID@GROUP"). pytest-xdist 3.8 writes it to
    ``item._nodeid``, which pytest 9.2 no longer reads (the id lives in ``item._id``): without this every group
    would be ignored and, say, two docker tests would run at once. Done only where xdist's own did not."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if names and "@" not in item.nodeid and hasattr(item, "_id"):
        item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


# --------------------------------------------------------------------------- each tier's time
# The tiers are the markers: gpu, docker, slow (first that applies), and unit for the rest. Each test carries
# its tier in user_properties (which xdist sends back with its reports), and the end of every run prints, per
# tier, its tests, the time they took added up, and its wall span: from its first test's start to its last
# test's end (tiers run side by side on the workers, so the spans overlap).
TIERS = ("unit", "docker", "slow", "gpu")


def tier_of(item: pytest.Item) -> str:
    return next((t for t in ("gpu", "docker", "slow") if item.get_closest_marker(t)), "unit")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        item.user_properties.append(("tier", tier_of(item)))


class _TierClock:
    def __init__(self) -> None:
        self.tests: dict[str, dict[str, str]] = {t: {} for t in TIERS}  # tier -> nodeid -> outcome
        self.seconds = dict.fromkeys(TIERS, 0.0)
        self.span: dict[str, tuple[float, float]] = {}

    def add(self, report: pytest.TestReport) -> None:
        tier = dict(report.user_properties).get("tier")
        if tier not in self.seconds:
            return
        self.seconds[tier] += report.duration
        start, stop = self.span.get(tier, (report.start, report.stop))
        self.span[tier] = (min(start, report.start), max(stop, report.stop))
        outcome = self.tests[tier].get(report.nodeid, "passed")
        if report.failed:
            outcome = "failed"
        elif report.skipped and outcome == "passed":
            outcome = "skipped"
        self.tests[tier][report.nodeid] = outcome

    def lines(self) -> list[str]:
        out = []
        for tier in TIERS:
            if not self.tests[tier]:
                continue
            outcomes = list(self.tests[tier].values())
            counts = ", ".join(f"{outcomes.count(o)} {o}" for o in ("passed", "failed", "skipped") if o in outcomes)
            first, last = self.span[tier]
            out.append(f"{tier} tier: {len(outcomes)} tests ({counts}), {last - first:.0f} s wall "
                       f"(first start to last end), {self.seconds[tier]:.0f} s of test time added up")
        return out


_CLOCK = _TierClock()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _CLOCK.add(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = _CLOCK.lines()
    if lines:
        terminalreporter.section("time per tier")
        for line in lines:
            terminalreporter.write_line(line)
