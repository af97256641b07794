"""The reproduce verdict as a group-sequential rule (``kit reproduce --until-decided``), pure: per look of the new
run, per A/B effect, D_k in, the decision out. The method: docs/reproduce.md, "Stopping once the verdict is
decided".

At look k (after block k of the new run) D_k = (new effect on the cells so far) - (original effect), var D_k =
var_o + var_n(k). The original's estimate is common to every look and the new run's are nested, so cov(D_j, D_k) =
var D_k for j < k: Z_k = D_k / sd_k has the canonical joint distribution on the information I_k = 1 / var D_k, with
corr(Z_j, Z_k) = sd_k / sd_j. var D never falls below var_o: the original's precision caps what any reproduction
can show (``reachable``, a non-binding note).

The boundaries are ``kit.stats.sequential``'s at the fraction t_k = n_k / N, the new run's cells so far over the
planned ones (for unequal arms (1/n_a + 1/n_b at the maximum) / (the same now)), and 1 at the last look, which
spends what is left. Not I_k / I_max: that ratio needs var_n estimated from the cells so far, and a fraction that
moves with the variance estimate the t statistic divides by spent early alpha exactly when the statistic was
inflated (simulated: 10.9 % and 12.3 % false "inconsistent" at CV 10 %, 8 and 16 repeats, against 5.4 % and 3.8 %
for the fixed rule). n_k / N needs no estimate, and is the smallest every correlation can be (var_o >= 0 only
raises sd_k / sd_j above sqrt(n_j / n_k)), so the boundaries err on the safe side whatever the two runs' noise
(Slepian's inequality for the one-sided tests; the simulation for the two-sided one). A look where the new run's
SE rests on fewer than MIN_DF df (the first look of the blocked analysis: two pairs, one df) tests nothing: that
far in the tail the t quantiles on D's Satterthwaite df are unreliable (simulated: 0.4 % false "inconsistent" at
such a look, whose boundary allows 0.01 %).

- **inconsistent**: the two-sided test of D = 0, group-sequential, Holm across the family as ``holm_sequential``
  does (alpha passes on after a rejection, boundaries recomputed at every look so far);
- **reproduced**: each of TOST's one-sided tests (H0: D <= -delta, H0: D >= delta) rejected at level alpha by
  one-sided group-sequential boundaries (``sides=1``: computed by the same recursion, not borrowed from a two-sided
  design at 2 alpha), each once rejected staying rejected, and an effect the original found pointing the same way at
  the look that completes it. "Reproduced" needs every effect, an intersection-union test: no correction.
- Reproduced comes before inconsistent (as in the fixed rule); a comparison's verdict, once decided, stays.
- t statistics: each p is compared with the boundary's nominal level (the "significance level" approach, Jennison &
  Turnbull 2000, section 11.4, as kit's A/B looks do); at the last look on D's Satterthwaite df (the fixed rule's),
  at an interim look on min(df_o, df_new), the Welch bound that holds whatever the two runs' variances: the plug-in
  Satterthwaite df rises exactly when the new run's few-df variance came out small, and far in the tail, where the
  interim boundaries sit, that made the rule liberal (simulated, new run twice as noisy, CV 10 %, 8 repeats: 5.69 %
  false "inconsistent" in 16 000 against 4.99 % for the fixed rule; with the bound 4.63 %).

The run stops when the headline is decided: any effect inconsistent, or every effect reproduced; else at its
maximum, whose undecided effects are imprecise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kit.reproduce.equivalence import Contrast, interval, p_sides, p_zero
from kit.stats.sequential import Hypothesis, boundaries, first_crossing, holm_sequential

SPENDING = "obrien-fleming"  # little spent early: the last look keeps nearly the fixed design's power
FRACTION_CAP = 0.999  # the most a look before the last may claim
MIN_DF = 2.0  # a look whose new run's SE rests on fewer df tests nothing (its t quantiles are unreliable that far out)


@dataclass(frozen=True)
class LookStat:
    """One effect at the look: D (None: too few cells), the new run's cells so far and at the maximum as a variance
    factor (1/n_arm + 1/n_base: the information fraction's measure), its own df, the original's SE and the new
    effect's SE predicted at the planned cells (the ``reachable`` note), the margin, the original's log effect where
    it found one, and whether a guardrail withholds it."""

    d: Contrast | None
    new_cells: float  # 1/n_arm + 1/n_base of the new run's ok cells so far
    max_cells: float  # the same at the planned cells
    df_new: float | None  # the new run's own df (its SE rests on it)
    df_original: float | None  # the original's
    se_original: float
    se_new_max: float
    delta: float
    claimed: float | None = None
    withheld: bool = False

    @property
    def var_max(self) -> float:
        return self.se_original**2 + self.se_new_max**2

    def fraction(self, final: bool) -> float:
        """The information fraction the boundaries use: the new run's cells so far over the planned ones
        (max_cells / new_cells: n_k / N for balanced cells), 1 at the last look, 0 where nothing is tested (no D,
        or the new run's SE on fewer than MIN_DF df)."""
        if self.d is None or self.df_new is None or self.df_new < MIN_DF:
            return 0.0
        if final:
            return 1.0
        return min(self.max_cells / self.new_cells, FRACTION_CAP)

    def tested(self, final: bool) -> Contrast | None:
        """D as this look tests it: the last look on D's Satterthwaite df (the fixed rule's), an interim one on the
        smaller of the two runs' df (the bound that holds whatever their variances)."""
        if self.d is None or final or self.df_original is None or self.df_new is None:
            return self.d
        return Contrast(self.d.estimate, self.d.se, min(self.df_original, self.df_new), self.d.groups)

    def direction_held(self) -> bool | None:
        if self.claimed is None or self.d is None:
            return None
        return (self.claimed + self.d.estimate) * self.claimed > 0


@dataclass(frozen=True)
class Past:
    """One effect at a look as recorded: what the tests need of it (untested looks carry p = 1)."""

    fraction: float
    p_zero: float
    p_lower: float
    p_upper: float
    direction_held: bool | None
    tested: bool = True


@dataclass(frozen=True)
class SeqDecision:
    fraction: float
    tested: bool
    df: float | None  # the df this look's p-values are on
    p_zero: float | None
    p_lower: float | None
    p_upper: float | None
    family_alpha: float
    nominal_zero: float  # at this look (0: no new information, or nothing to spend)
    nominal_tost: float
    zero_rejected_at: int | None  # 1-based looks
    lower_rejected_at: int | None
    upper_rejected_at: int | None
    direction_held: bool | None
    repeated_ci: tuple[float, float] | None  # log scale
    reachable: bool | None
    verdict: str  # reproduced | inconsistent | continue | withheld | imprecise
    decided_at: int | None


def past_of(s: LookStat, final: bool, gained: bool = True) -> Past:
    """The record of ``s`` as the tests read it (``gained``: its fraction rose above every earlier one)."""
    fr = s.fraction(final)
    if s.d is None or s.withheld or not gained:
        return Past(fr, 1.0, 1.0, 1.0, s.direction_held(), tested=False)
    d = s.tested(final)
    assert d is not None
    lower, upper = p_sides(d, s.delta)
    return Past(fr, p_zero(d), lower, upper, s.direction_held())


def _gained(history: Sequence[Past], fraction: float) -> bool:
    return fraction > 0 and all(fraction > p.fraction for p in history)


def _one(j: int | None) -> int | None:
    return None if j is None else j + 1


def _nominal(fractions: Sequence[float], level: float, final: bool, sides: int) -> float:
    """The boundary of the last look as a nominal p level, over the looks that gained information."""
    fr = [t for i, t in enumerate(fractions) if t > 0 and all(t > u for u in fractions[:i])]
    if not fr or fr[-1] != fractions[-1]:
        return 0.0
    return _level(boundaries(fr, level, SPENDING, final=final, sides=sides)[-1], sides)


def _level(c: float, sides: int) -> float:
    if math.isinf(c):
        return 0.0
    return sides * 0.5 * math.erfc(c / math.sqrt(2))


def _reachable(fractions: Sequence[float], s: LookStat, alpha: float) -> bool | None:
    """Whether the maximum could show equivalence if nothing changed: delta beyond the last look's one-sided
    boundary times D's SD at the planned cells (normal approximation; non-binding, a note)."""
    fr = [t for i, t in enumerate(fractions) if t > 0 and all(t > u for u in fractions[:i])]
    if s.d is None or not fr or fr[-1] >= 1:
        return None
    last = boundaries([*fr, 1.0], alpha, SPENDING, final=True, sides=1)[-1]
    return s.delta > last * math.sqrt(s.var_max)


def decide_look(history: Sequence[Sequence[Past]], now: Sequence[LookStat], alpha: float, *,
                final: bool) -> list[SeqDecision]:
    """Every effect's decision at this look, after ``history`` (per effect, its earlier looks in order, as
    recorded or recomputed); ``final``: the last look the plan allows."""
    hist = list(history) or [[] for _ in now]
    k = len(hist[0]) + 1 if hist else 1
    pasts = [[*h, past_of(s, final, _gained(h, s.fraction(final)))] for h, s in zip(hist, now, strict=True)]
    zero = holm_sequential([Hypothesis(tuple(p.fraction for p in ps), tuple(p.p_zero for p in ps)) for ps in pasts],
                           alpha, SPENDING, final=final)
    out = []
    for ps, s, z in zip(pasts, now, zero, strict=True):
        fr = tuple(p.fraction for p in ps)
        lower, _ = first_crossing(Hypothesis(fr, tuple(p.p_lower for p in ps)), alpha, SPENDING, final, sides=1)
        upper, _ = first_crossing(Hypothesis(fr, tuple(p.p_upper for p in ps)), alpha, SPENDING, final, sides=1)
        reproduced = None
        if lower is not None and upper is not None:
            reproduced = next((j for j in range(max(lower, upper), k)
                               if ps[j].tested and ps[j].direction_held is not False), None)
        nominal_tost = _nominal(fr, alpha, final, 1)
        verdict, at = _verdict(reproduced, z.rejected_at, ps[-1].tested, s, final, k)
        now_p, d = ps[-1], s.tested(final)
        ci = interval(d, 1 - 2 * nominal_tost) if d is not None and nominal_tost > 0 and now_p.tested else None
        out.append(SeqDecision(
            fraction=now_p.fraction, tested=now_p.tested, df=None if d is None else d.df,
            p_zero=None if d is None else p_zero(d),
            p_lower=None if d is None else p_sides(d, s.delta)[0],
            p_upper=None if d is None else p_sides(d, s.delta)[1],
            family_alpha=z.level, nominal_zero=_nominal(fr, z.level, final, 2), nominal_tost=nominal_tost,
            zero_rejected_at=_one(z.rejected_at), lower_rejected_at=_one(lower), upper_rejected_at=_one(upper),
            direction_held=s.direction_held(), repeated_ci=ci,
            reachable=None if at is not None or final else _reachable(fr, s, alpha), verdict=verdict, decided_at=at))
    return out


def _verdict(reproduced: int | None, zero: int | None, tested: bool, s: LookStat, final: bool,
             k: int) -> tuple[str, int | None]:
    if reproduced is not None:
        return "reproduced", reproduced + 1
    if zero is not None:
        return "inconsistent", k  # the first look that rejects it: the run stops there
    if final:
        return "imprecise", None
    return ("withheld" if s.withheld or s.d is None else "continue"), None


def stop_of(verdicts: Sequence[str], final: bool) -> tuple[str | None, str | None, str]:
    """(stop, the headline verdict, why): decided once any effect is inconsistent or every one reproduced; at the
    maximum otherwise (the undecided ones imprecise); else (None, None, what it waits for)."""
    n = len(verdicts)
    bad = sum(v == "inconsistent" for v in verdicts)
    good = sum(v == "reproduced" for v in verdicts)
    if bad:
        return "decided", "inconsistent", f"{bad} of {n} judged effect(s) inconsistent"
    if n and good == n:
        return "decided", "reproduced", "every judged effect reproduced"
    if final:
        return "max_repeats", "imprecise", f"the maximum was reached with {n - good} of {n} judged effect(s) " \
                                           "undecided"
    return None, None, f"{n - good} of {n} judged effect(s) undecided"
