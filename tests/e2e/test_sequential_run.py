"""A sequential `kit run` (design.sequential) against kit's real demo engine: a large effect (OEA k0=1 against
top-8 at one stream, Pocock-type spending) stops it before its maximum of six looks; every look is in the bundle, `kit verify` recomputes them,
the report says why it stopped, and `kit run --resume` of the finished bundle runs nothing more. Where kit.load's
guardrail flags a cell client-bound (it does on a 2-core machine other sessions load), the comparison is withheld
at every look: the run must then go to its maximum, and the test stops there as skipped, saying which cell."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import ROOT, bundle_of, kit, read_json
from scipy import stats

from kit.bundle.looks import check_looks

# a pair's log-ratio SD above which a -45 % effect (log ratio -0.6) may go undecided until the last look: Pocock's
# boundary at look 5 of 6 (10 pairs, t on 9 df near 2.9) needs SE <= 0.2, i.e. a pair SD <= 0.65; CI once measured
# 0.56 in another e2e test's run while the simulations held the cores
NOISY = 0.3


def pair_sd(c: dict[str, Any]) -> float:
    """A pair's log-ratio SD, read back from the blocked analysis' interval: its SE times sqrt(pairs = df + 1)."""
    lo, hi = c["ratio_ci"]
    se = (math.log(hi) - math.log(lo)) / (2 * float(stats.t.ppf(0.5 + c["interval_confidence"] / 2, c["df"])))
    return se * math.sqrt(c["df"] + 1)


@pytest.mark.slow
@pytest.mark.quiet  # make test runs it alone, after the parallel tiers: under them it was flagged client-bound in
# every run (4 and 5 workers on 2 cores) and skipped after its sixth look; at 3 workers it decided at an early look
def test_a_sequential_run_stops_when_decided_and_its_looks_verify(tmp_path: Path, port: int,
                                                                   isolated: dict[str, str]) -> None:
    # the demo's engine (its tiny test engine is so fast that a busy machine's noise is most of its TPOT), one
    # stream, OEA k0=1 (top-1) against top-8: about -45 % TPOT. 16 requests a cell, not the demo's 40: a cell's
    # mean TPOT is then still within a few per cent (a pair's log-ratio SD about 0.1 on a quiet machine, against
    # the 0.65 that look 5 needs), the run to its maximum (a busy machine) takes half the time, and a shorter cell
    # is less often caught by a hiccup of the machine (client-bound)
    data = yaml.safe_load((ROOT / "experiments" / "demo.yaml").read_text())
    data["name"], data["server"]["port"] = "seq", port
    data["arms"][1]["args"] = ["--oea-k0", "1"]
    data["load"].update(levels=[1], requests_per_level=[16], warmup_requests=4)
    data["design"] = {"repeats": 12, "order": "abba", "sequential": {"spending": "pocock"}}
    path = tmp_path / "seq.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "r"
    r = kit("run", str(path), "--out", str(out), "--allow-unsigned", env=isolated, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(out)
    looks = sorted((b / "looks").iterdir())
    last = read_json(looks[-1])
    summary = read_json(b / "summary.json")
    assert "## Sequential design" in (b / "report.md").read_text()
    v = kit("verify", str(b), env=isolated)
    assert v.returncode == 0 and "sequential look(s) recomputed from the records OK" in v.stdout, v.stdout + v.stderr
    again = kit("run", "--resume", str(b), "--allow-unsigned", env=isolated)
    assert again.returncode == 0 and "already complete" in again.stdout + again.stderr, again.stdout + again.stderr
    # a look whose boundary was written otherwise than the records give: the recomputation names it (the
    # signature check of `kit verify` would refuse the changed file first)
    doc = read_json(looks[0])
    doc["comparisons"][0]["nominal_p"] = 0.5
    looks[0].write_text(json.dumps(doc))
    _, problems = check_looks(b)
    assert problems and "looks/001.json" in problems[0] and "nominal_p" in problems[0], problems
    if last["comparisons"][0]["decision"] == "withheld":  # kit.load's guardrail flagged a cell on a busy machine
        assert last["stop"] == "max_repeats" and len(looks) == 6  # never decided: it runs to its maximum
        pytest.skip(f"a cell was client-bound on this machine: {summary['levels'][0]['client_bound_cells']}")
    if last["stop"] == "max_repeats":  # explainable only by a machine far noisier than a quiet one (pair SD ~0.08)
        [c] = [c for c in summary["comparisons"] if c["role"] == "primary"]
        sd = pair_sd(c)
        if sd > NOISY:
            pytest.skip(f"the machine's cell-to-cell noise (SD of a pair's log ratio {sd:.2f}, over {NOISY}) is too "
                        "large to decide before the maximum")
    assert last["stop"] == "decided" and len(looks) < 6, r.stdout  # stopped before the sixth (last) block
    assert [c["decision"] for c in last["comparisons"]] == ["efficacy"]
    printed = " ".join(r.stderr.split())  # the progress lines, wrapped by the terminal
    assert f"look {len(looks)} of 6" in printed and "stop: decided" in printed, printed
    assert summary["sequential"]["stop"] == "decided" and summary["sequential"]["cells_not_run"] > 0
    assert summary["failed_cells"] == []  # the cells it never needed are not failures
    primary = [c for c in summary["comparisons"] if c["role"] == "primary"]
    assert primary[0]["significant"] and "(sequential: rejected at look" in primary[0]["verdict"]
