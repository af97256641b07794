"""The reproduction verdict from two real summaries (kit.stats over simulated records): identical runs reproduce;
a slower host moves the arms (a fact, judged only with same_hardware) but not the effect; a vanished effect is
inconsistent; a client-bound level, different output lengths and too few cells withhold; the contrasts equal kit's
own A/B comparisons in summary.json; judge() on summaries decides as the simulation's entry (judge_effects) does."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from support.bundles import ArmModel, BundleSpec, cut_records, make_bundle

from kit.files.summary import Summary
from kit.reproduce.decide import EffectCells, Rule, judge_effects
from kit.reproduce.equivalence import contrast, holm_adjusted, logs
from kit.reproduce.verdict import arm_cells, judge, overall
from kit.stats import summarize_bundle

EFFECT = 0.8  # oea's decode steps 20 % faster in the original
SPEC = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=EFFECT)}, repeats=4, levels=(1, 4),
                  requests=32, cell_sd=0.01, cell_level_sd=0.005)
RULE = Rule(effect_margin=0.5, absolute_margin=0.05, alpha=0.05)
Make = Callable[..., Summary]


@pytest.fixture(scope="module")
def make(tmp_path_factory: pytest.TempPathFactory) -> Make:
    def summary(**changes: object) -> Summary:
        spec = BundleSpec(**{**SPEC.__dict__, **changes})  # type: ignore[arg-type]
        root = make_bundle(tmp_path_factory.mktemp("b") / "bundle", spec)
        return Summary.model_validate(summarize_bundle(root))

    return summary


@pytest.fixture(scope="module")
def original(make: Make) -> Summary:
    return make()


def by(comps: list, kind: str, arm: str, level: int):  # type: ignore[no-untyped-def,type-arg]
    return next(c for c in comps if c.kind == kind and c.arm == arm and c.level == level)


def test_identical_runs_reproduce_and_the_conclusion_holds(original: Summary) -> None:
    comps, concl = judge(original, original, RULE)
    assert len(comps) == 2 * 2 + 2  # every arm at every level, then the effect at every level
    effects = [c for c in comps if c.kind == "effect"]
    assert {c.verdict for c in effects} == {"reproduced"} and overall(comps) == "reproduced"
    assert all(c.margin_basis == "effect" and c.direction_held for c in effects)  # the original found its effect
    assert all(c.ratio == pytest.approx(1.0) and c.p_equivalent < 0.05 for c in effects)  # type: ignore[operator]
    arms = [c for c in comps if c.kind == "arm"]
    assert all(c.verdict is None and c.status == "shift" and not c.judged for c in arms)
    assert all(c.held for c in concl) and len(concl) == 2
    assert "within the margin 50 % of the original effect" in effects[0].text
    assert "the machines' shift" in arms[0].text


def test_a_slower_host_moves_the_arms_not_the_effect(original: Summary, make: Make) -> None:
    """Every latency 30 % higher: the arms' shift is reported with its interval, outside the verdict; the effect
    reproduces. With same_hardware pre-registered the shift itself is inconsistent."""
    slower = make(arms={"baseline": ArmModel(itl_factor=1.3), "oea": ArmModel(itl_factor=1.3 * EFFECT)})
    comps, _ = judge(original, slower, RULE)
    for level in (1, 4):
        arm = by(comps, "arm", "baseline", level)
        assert arm.verdict is None and arm.ratio == pytest.approx(1.3, rel=0.03)
        assert arm.ratio_ci.low > 1.2 and arm.interval_confidence == pytest.approx(0.95)
        assert by(comps, "effect", "oea", level).verdict == "reproduced"
    assert overall(comps) == "reproduced"
    same, _ = judge(original, slower, RULE, same_hardware=True)
    assert by(same, "arm", "baseline", 1).verdict == "inconsistent" and overall(same) == "inconsistent"


def test_a_vanished_effect_is_inconsistent(original: Summary, make: Make) -> None:
    vanished = make(arms={"baseline": ArmModel(), "oea": ArmModel()})  # same seed: baseline identical
    comps, concl = judge(original, vanished, RULE)
    for level in (1, 4):
        effect = by(comps, "effect", "oea", level)
        assert effect.verdict == "inconsistent" and effect.ratio == pytest.approx(1 / EFFECT, rel=0.03)
        assert effect.p_zero_adjusted < 0.05 and "INCONSISTENT" in effect.text  # type: ignore[operator]
    assert overall(comps) == "inconsistent"
    assert all(c.held is False and "significant only in the original run" in c.text for c in concl)


def test_a_client_bound_level_is_never_reproduced(original: Summary, make: Make) -> None:
    bound = make(client_bound=frozenset({("oea-r2", 4)}))
    comps, _ = judge(original, bound, RULE)
    assert by(comps, "arm", "oea", 4).status == "client_bound"
    assert by(comps, "effect", "oea", 4).status == "client_bound"
    assert by(comps, "effect", "oea", 4).verdict == "imprecise"
    assert by(comps, "effect", "oea", 1).verdict == "reproduced"
    assert overall(comps) == "imprecise"
    # the same the other way round: client-bound in the original
    assert by(judge(bound, original, RULE)[0], "effect", "oea", 4).status == "client_bound"


def test_different_failure_rates_are_a_fact_unless_same_hardware(original: Summary, make: Make) -> None:
    failing = make(errors_per_level=10)
    comps, _ = judge(original, failing, RULE)
    c = by(comps, "arm", "baseline", 1)
    assert c.status == "error_rate_differs" and c.verdict is None
    assert "failed 0/128 originally, 40/168 now" in c.reason
    same, _ = judge(original, failing, RULE, same_hardware=True)
    assert by(same, "arm", "baseline", 1).verdict == "inconsistent"


def test_responses_cut_short_in_one_run_withhold_the_verdict(original: Summary, tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", SPEC)
    for r in range(1, 5):
        cut_records(root, f"oea-r{r}", 1, 20)  # the demo manifest asks for 32 tokens
    short = Summary.model_validate(summarize_bundle(root))
    assert by_primary(short, "oea", 1).status == "output_lengths_differ"
    comps, _ = judge(original, short, RULE)
    assert by(comps, "arm", "oea", 1).status == "output_lengths_differ"
    assert by(comps, "effect", "oea", 1).status == "ab_withheld"  # the new run's A/B itself was withheld
    assert by(comps, "effect", "oea", 1).verdict == "imprecise"
    assert by(comps, "effect", "oea", 4).verdict == "reproduced"  # untouched


def by_primary(s: Summary, arm: str, level: int):  # type: ignore[no-untyped-def]
    return next(c for c in s.comparisons if c.arm == arm and c.level == level and c.role == "primary")


def test_too_few_cells_is_imprecise_with_the_cells_needed(original: Summary, make: Make) -> None:
    few = make(failed={"oea-r2": "boom", "oea-r3": "boom", "oea-r4": "boom"})
    comps, concl = judge(original, few, RULE)
    c = by(comps, "effect", "oea", 1)
    assert c.status == "too_few_cells" and c.verdict == "imprecise" and c.repeats_needed == 2
    assert c.cells.original == 4 and c.cells.new == 1
    assert by(comps, "arm", "oea", 1).status == "too_few_cells"
    assert all(x.held is None for x in concl)  # the new run's A/B verdict is withheld


def test_a_noisy_rerun_is_imprecise_with_repeats_at_no_difference(original: Summary, make: Make) -> None:
    noisy = make(cell_sd=0.15, seed=5)
    even = Rule(effect_margin=0.5, absolute_margin=0.05, alpha=0.05, even=True)
    comps, _ = judge(original, noisy, even)
    undecided = [c for c in comps if c.verdict == "imprecise"]
    assert undecided, [c.text for c in comps]
    for c in undecided:
        assert c.repeats_needed is None or (c.repeats_needed > 4 and c.repeats_needed % 2 == 0)
        assert "repeats per arm in each run would show equivalence with 80 % power if nothing changed" in c.text


def test_judge_decides_as_the_simulations_entry_does(original: Summary, make: Make) -> None:
    """kit.reproduce.decide.judge_effects (what tests/stats/sim_reproduce.py feeds) on the summaries' cells gives
    judge()'s verdicts, estimates and Holm-adjusted p-values (no guardrail withholds here)."""
    for new in (make(seed=9), make(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.9)}, seed=4)):
        comps, _ = judge(original, new, RULE)
        effects = [EffectCells(*(logs(arm_cells(run, a, lv, "tpot_mean_ms").values) for run in (original, new)
                                 for a in ("oea", "baseline")), claimed=by_primary(original, "oea", lv).status
                               == "significant",
                               original_blocks=_blocks(original, lv), new_blocks=_blocks(new, lv)) for lv in (1, 4)]
        for lv, d in zip((1, 4), judge_effects(effects, RULE), strict=True):
            c = by(comps, "effect", "oea", lv)
            assert d is not None and c.verdict == d.verdict
            assert c.log_estimate == pytest.approx(d.estimate) and c.p_zero_adjusted == pytest.approx(d.p_zero_adjusted)


def _blocks(s: Summary, level: int) -> tuple[list[int], list[int]]:
    return arm_cells(s, "oea", level, "tpot_mean_ms").blocks(), arm_cells(s, "baseline", level, "tpot_mean_ms").blocks()


@pytest.mark.parametrize("method", ["welch", "blocked", "blocked-geomean"])
def test_the_effect_contrast_is_kits_own_ab_comparison(make: Make, method: str) -> None:
    """The effect contrast on the summary's cell values (schema 5's cell_values: the pre-registered statistic) is
    summary.json's own primary comparison (ratio, df and p) under the pre-registered method: Welch, or blocked
    within ABBA blocks (the default), also under another cell statistic (the geometric mean)."""
    analysis = {"welch": "  method: welch\n", "blocked": "", "blocked-geomean": "  statistic: geomean\n"}[method]
    original = make(analysis=analysis)
    assert original.analysis.comparison_method == method.split("-", maxsplit=1)[0]
    for comp in original.comparisons:
        if comp.role != "primary":
            continue
        a, b = (arm_cells(original, x, comp.level, comp.metric) for x in (comp.arm, comp.baseline))
        c = contrast(logs(a.values), logs(b.values), None if method == "welch" else (a.blocks(), b.blocks()))
        assert c is not None
        assert math.exp(c.estimate) == pytest.approx(comp.ratio, rel=1e-5)
        assert c.df == pytest.approx(comp.df, rel=1e-4)
        p = 2 * sps.t.sf(abs(c.estimate) / c.se, c.df)  # cell_values carry 6 significant digits: p to ~1e-3
        assert p == pytest.approx(comp.p_value, rel=1e-3, abs=1e-9)


def test_a_metric_other_than_tpot(make: Make) -> None:
    """analysis.primary decides what is compared (throughput: output tokens per second of each cell)."""
    s = make()
    data = s.model_dump()
    data["analysis"]["primary"] = "throughput_tok_s"
    tput = Summary.model_validate(data)
    comps, _ = judge(tput, tput, RULE)
    assert all(c.metric == "throughput_tok_s" for c in comps)
    assert "tok/s" in by(comps, "arm", "oea", 1).text


def _drawn(s: Summary, rng: np.random.Generator, sd: float) -> Summary:
    """``s`` with every cell's TPOT mean drawn around 10 ms with between-cell sd ``sd`` on the log scale: the
    same true value in every arm, level and run (an A/A reproduction of an A/A experiment: no effect was found,
    mostly, so the absolute margin applies)."""
    cells = []
    for cell in s.cells:
        levels = {}
        for k, f in cell.levels.items():
            x = 10.0 * math.exp(rng.normal(0.0, sd))
            levels[k] = f.model_copy(update={"tpot_ms": f.tpot_ms.model_copy(update={"mean": x}),
                                             "cell_values": {**(f.cell_values or {}), "tpot_mean_ms": x}})
        cells.append(cell.model_copy(update={"levels": levels}))
    return s.model_copy(update={"cells": cells})


def _false_alarms(original: Summary, draws: int) -> tuple[int, int]:
    """How many draws were judged "inconsistent" overall, and how many would have been with every test at alpha on
    its own (any raw p of no difference below alpha)."""
    rng = np.random.default_rng(20250101)
    corrected = uncorrected = 0
    for _ in range(draws):
        comps, _ = judge(_drawn(original, rng, 0.12), _drawn(original, rng, 0.12), RULE)
        corrected += overall(comps) == "inconsistent"
        uncorrected += any(c.p_zero is not None and c.p_zero < 0.05 for c in comps if c.judged)
    return corrected, uncorrected


def test_nothing_changed_is_falsely_inconsistent_at_most_alpha_of_the_time(original: Summary) -> None:
    """300 seeded A/A reproductions with noisy cells (log sd 0.12 per cell, 4 cells per arm): the overall
    "inconsistent" over the family of 2 effects stays within alpha (+ binomial slack) with Holm's correction;
    without it (any raw p below alpha) it is higher, here checked to be above alpha."""
    draws = 300
    slack = 3 * math.sqrt(0.05 * 0.95 / draws)  # ~0.038
    corrected, uncorrected = _false_alarms(original, draws)
    print(f"false 'inconsistent': {corrected}/{draws} with Holm, {uncorrected}/{draws} without")
    assert corrected / draws <= 0.05 + slack
    assert uncorrected > corrected and uncorrected / draws > 0.05


def test_holm_adjusted_by_hand() -> None:
    """Holm (1979) by hand: sorted 0.01, 0.02, 0.03, 0.04 times 4, 3, 2, 1 -> 0.04, 0.06, 0.06 (monotone), 0.06."""
    assert holm_adjusted([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm_adjusted([0.5, 0.9]) == [1.0, 1.0] and holm_adjusted([]) == []
