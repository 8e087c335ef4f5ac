"""Statistics of an A/B: ratio of medians, bootstrap interval, Mann-Whitney U, power.

The unit of evidence is a *repeat median*: the median of one round's samples of one
(variant, scenario, metric) on one side. Samples within a round share the GPU's state of
the moment and are not independent; repeat medians from interleaved rounds are closer to
it, which is why the test runs on them (DESIGN 5: at least 10 per side).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy


@dataclass(frozen=True)
class Comparison:
    base_median: float  # median of the base side's repeat medians (ms)
    head_median: float
    ratio: float  # head / base
    ci_low: float  # bootstrap interval of the ratio
    ci_high: float
    p_slower: float  # one-sided Mann-Whitney U: head slower than base
    p_faster: float  # one-sided: head faster
    n_base: int
    n_head: int

    @property
    def p_value(self) -> float:
        """The p-value in the direction of the observed change."""
        return self.p_slower if self.ratio >= 1.0 else self.p_faster


def ratio_of_medians(base, head) -> float:
    return float(np.median(head) / np.median(base))


def bootstrap_ci(base, head, resamples: int = 2000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap of median(head) / median(base), each side resampled on its own."""
    rng = np.random.default_rng(seed)
    b = np.asarray(base, dtype=float)
    h = np.asarray(head, dtype=float)
    mb = np.median(rng.choice(b, size=(resamples, b.size), replace=True), axis=1)
    mh = np.median(rng.choice(h, size=(resamples, h.size), replace=True), axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(mh / mb, [tail, 1.0 - tail])
    return float(lo), float(hi)


EXACT_UP_TO = 50  # repeats per side up to which the exact U distribution is used


def _method(n: int) -> str:
    """Exact p-values for small samples: scipy's default switches to the normal
    approximation above 8 per side, which overstates p tenfold at 10 vs 10."""
    return "exact" if n <= EXACT_UP_TO else "asymptotic"


def mann_whitney(base, head) -> tuple[float, float]:
    """One-sided Mann-Whitney U p-values (head slower, head faster)."""
    base, head = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    if base.size < 1 or head.size < 1:
        return 1.0, 1.0
    if np.ptp(np.concatenate([base, head])) == 0:  # all equal: no evidence either way
        return 1.0, 1.0
    method = _method(max(base.size, head.size))
    slower = _scipy.mannwhitneyu(head, base, alternative="greater", method=method).pvalue
    faster = _scipy.mannwhitneyu(head, base, alternative="less", method=method).pvalue
    return float(slower), float(faster)


def compare(base, head, resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> Comparison:
    base = np.asarray(base, dtype=float)
    head = np.asarray(head, dtype=float)
    lo, hi = bootstrap_ci(base, head, resamples, confidence, seed)
    p_slower, p_faster = mann_whitney(base, head)
    return Comparison(float(np.median(base)), float(np.median(head)), ratio_of_medians(base, head),
                      lo, hi, p_slower, p_faster, base.size, head.size)


def cv(values) -> float:
    """Coefficient of variation (sample stdev / mean)."""
    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / v.mean()) if v.size > 1 else 0.0


def gate_power(cv_: float, n: int, effect: float, alpha: float, fail: float,
               sims: int = 2000, seed: int = 0) -> float:
    """Probability that the gate fails a true slowdown `effect` (ratio), by simulation.

    Repeat medians are modelled as normal with relative stdev `cv_` (what an A/A run
    measures); the gate fails when the ratio of medians exceeds `fail` and the one-sided
    Mann-Whitney U test gives p < alpha (perf/verdicts.py).
    """
    rng = np.random.default_rng(seed)
    base = rng.normal(1.0, cv_, size=(sims, n))
    head = rng.normal(effect, cv_ * effect, size=(sims, n))
    ratio = np.median(head, axis=1) / np.median(base, axis=1)
    p = _scipy.mannwhitneyu(head, base, alternative="greater", axis=1, method=_method(n)).pvalue
    return float(np.mean((ratio > fail) & (p < alpha)))


def min_detectable_effect(cv_: float, n: int, alpha: float, fail: float, power: float = 0.95,
                          sims: int = 2000, seed: int = 0, hi: float = 3.0) -> float:
    """Smallest slowdown (ratio) the gate fails with at least `power`, by bisection."""
    lo_r, hi_r = 1.0, hi
    if gate_power(cv_, n, hi_r, alpha, fail, sims, seed) < power:
        return math.inf
    for _ in range(30):
        mid = (lo_r + hi_r) / 2
        if gate_power(cv_, n, mid, alpha, fail, sims, seed) >= power:
            hi_r = mid
        else:
            lo_r = mid
        if hi_r - lo_r < 1e-4:
            break
    return hi_r


def test_only_mde(cv_: float, n: int, alpha: float, power: float = 0.95) -> float:
    """Normal approximation of the smallest ratio the test alone finds with `power`.

    Two-sample shift of means with stdev cv per repeat; Mann-Whitney's asymptotic
    efficiency against the t-test is 3/pi for normal data, so the effective n shrinks.
    """
    z_a = _scipy.norm.ppf(1 - alpha)
    z_b = _scipy.norm.ppf(power)
    n_eff = n * 3 / math.pi
    return 1.0 + (z_a + z_b) * cv_ * math.sqrt(2.0 / n_eff)
