"""Statistics of an A/B: paired rounds within processes, processes as the unit.

The latency gate measures base and head in the same process on the same tensors, in pairs
(one round = base and head once each, in alternating order), and repeats that in several
fresh processes. Its observations are therefore nested:

    d[p][r] = log(head / base) of round r in process p    (each side's value: a median of samples)

Rounds of one process share that process's state (memory placement, compiled binaries,
clocks of the moment), so they are not independent of each other; processes are. The unit
of independence is the *process*: `paired` estimates the change as the mean over processes
of each process's mean paired log ratio, tests it against the spread *between* processes
(`process_test`: a t-test on process means whose variance is never taken below the noise
calibrated on this GPU, `perf calibrate`), and gives a hierarchical bootstrap interval
(processes resampled, then rounds within each). A per-process offset that the pairing does
not cancel therefore counts as noise, never as a change.

`noise_components` splits A/A data into the round-to-round spread within a process
(`sigma_round`) and the process-to-process spread of process means beyond it (`tau`); the
standard deviation of the gate's estimate for P processes of R rounds is then
`gate_sigma(sigma_round, tau, P, R)`. `min_detectable` turns that into the smallest slowdown
the gate fails with a given power. `rate_interval` bounds a rate counted over gate runs (false
fails under A/A, detections of a planted slowdown: perf/lab/gate_power.py).

The older unpaired functions (`compare`: ratio of medians, bootstrap interval, Mann-Whitney
U over repeat medians) remain for results of separate processes (`perf compare`, the
nightly change-point alert), where nothing better is possible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# scipy.stats is imported by the functions that use it: about 0.5 s of import (-X importtime, 2-core
# CPU machine, 2026-11-29) in every process that imports this module, a gate that only plans or
# skips included

# --- paired, hierarchical (the A/B gate) ---------------------------------------------------


@dataclass(frozen=True)
class Paired:
    ratio: float  # exp(estimate): head / base
    ci_low: float  # hierarchical bootstrap interval of the ratio
    ci_high: float
    p_slower: float  # one-sided, process level: head slower
    p_faster: float
    se: float  # standard error of the log ratio the test used
    df: float  # its degrees of freedom (inf: calibrated noise alone)
    n_processes: int
    n_pairs: int
    noise: str  # which variance the test used: "this run" | "calibrated"

    @property
    def p_value(self) -> float:
        return self.p_slower if self.ratio >= 1.0 else self.p_faster


def log_ratios(base, head) -> np.ndarray:
    """Paired log(head / base) per round."""
    b, h = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    return np.log(h) - np.log(b)


def process_means(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, float]:
    """(mean per process, rounds per process, pooled within-process variance of a round)."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    means = np.array([g.mean() for g in groups])
    sizes = np.array([g.size for g in groups])
    dof = int(sum(s - 1 for s in sizes))
    within = float(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof) if dof > 0 else 0.0
    return means, sizes, within


def noise_components(groups: list[np.ndarray]) -> tuple[float, float]:
    """(sigma_round, tau) of A/A log ratios: the round-to-round standard deviation within a
    process, and the standard deviation of process means beyond what sigma_round explains."""
    means, sizes, within = process_means(groups)
    if means.size < 2:
        return math.sqrt(within), 0.0
    between = float(means.var(ddof=1))
    explained = within * float(np.mean(1.0 / sizes))
    return math.sqrt(within), math.sqrt(max(0.0, between - explained))


def gate_sigma(sigma_round: float, tau: float, processes: int, rounds: int) -> float:
    """Standard deviation of the gate's log-ratio estimate with this many processes and rounds."""
    return math.sqrt((tau ** 2 + sigma_round ** 2 / max(1, rounds)) / max(1, processes))


def process_test(groups: list[np.ndarray], calibrated_var: float | None = None,
                 calibrated_df: float | None = None) -> tuple[float, float, float, float, str]:
    """(p_slower, p_faster, se, df, source) of the mean of process means.

    This run's variance of one process's mean is the larger of the spread between its
    processes and the spread within them / rounds (P - 1 degrees of freedom). Without
    calibration the test is t with P - 1 degrees of freedom on it. With `calibrated_var`
    (tau^2 + sigma_round^2 / R from the calibration file, `calibrated_df` degrees of
    freedom: its processes - 1) the two estimates are pooled, weighted by their degrees of
    freedom, and never taken below the calibrated one; the test is t with the summed
    degrees of freedom. A run noisier than its calibration raises the variance; one quieter
    than it does not lower it. Fewer than two processes and no calibration: no test (p = 1).
    """
    from scipy import stats as _scipy

    means, sizes, within = process_means(groups)
    p = means.size
    if p < 2 and calibrated_var is None:
        return 1.0, 1.0, math.inf, 0.0, "this run"
    observed = max(float(means.var(ddof=1)) if p > 1 else 0.0, within * float(np.mean(1.0 / sizes)))
    df_run = float(max(0, p - 1))
    if calibrated_var is None:
        var, df, source = observed, df_run, "this run"
    else:
        df_cal = calibrated_df if calibrated_df and math.isfinite(calibrated_df) else 1e6
        pooled = (df_cal * calibrated_var + df_run * observed) / (df_cal + df_run)
        var, df = max(calibrated_var, pooled), df_cal + df_run
        source = "calibrated" if pooled <= calibrated_var else "calibrated, raised by this run"
    se = math.sqrt(var / p)
    estimate = float(means.mean())
    if se == 0.0:
        if estimate == 0.0:
            return 1.0, 1.0, 0.0, df, source
        return (0.0, 1.0, 0.0, df, source) if estimate > 0 else (1.0, 0.0, 0.0, df, source)
    t = estimate / se
    dist = _scipy.t(df) if math.isfinite(df) else _scipy.norm
    return float(dist.sf(t)), float(dist.cdf(t)), se, df, source


def hierarchical_bootstrap(groups: list[np.ndarray], resamples: int = 2000, confidence: float = 0.95,
                           seed: int = 0) -> tuple[float, float]:
    """Percentile interval of exp(mean of process means): processes resampled with
    replacement, then rounds within each chosen process."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    rng = np.random.default_rng(seed)
    p = len(groups)
    picks = rng.integers(0, p, size=(resamples, p))
    # Resampled mean of every process, `resamples` times each; then combine per pick.
    boot_means = np.stack([g[rng.integers(0, g.size, size=(resamples, g.size))].mean(axis=1)
                           for g in groups], axis=1)  # [resamples, p]
    estimates = np.take_along_axis(boot_means, picks, axis=1).mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(estimates, [tail, 1.0 - tail])
    return float(math.exp(lo)), float(math.exp(hi))


def paired(groups: list[np.ndarray], *, calibrated_var: float | None = None,
           calibrated_df: float | None = None, resamples: int = 2000, confidence: float = 0.95,
           seed: int = 0) -> Paired:
    """The gate's comparison of one case: `groups` holds each process's paired log ratios."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not groups:
        raise ValueError("no paired rounds")
    means, sizes, _ = process_means(groups)
    p_slower, p_faster, se, df, source = process_test(groups, calibrated_var, calibrated_df)
    lo, hi = hierarchical_bootstrap(groups, resamples, confidence, seed)
    return Paired(float(math.exp(means.mean())), lo, hi, p_slower, p_faster, se, df, len(groups),
                  int(sizes.sum()), source)


def critical(alpha: float, df: float) -> float:
    """One-sided critical value of the process test."""
    from scipy import stats as _scipy

    return float(_scipy.t.isf(alpha, df) if math.isfinite(df) else _scipy.norm.isf(alpha))


def min_detectable(se: float, fail: float, alpha: float, df: float, power: float = 0.95,
                   attempts: int = 1) -> float:
    """Smallest slowdown (ratio) the gate fails with probability `power`.

    The estimate is normal around the true log ratio with standard deviation `se`; the gate
    fails when it exceeds log(fail) and the test's t exceeds its critical value, in every one
    of `attempts` independent measurements (the first and each re-measure), so each must
    succeed with power^(1/attempts).
    """
    from scipy import stats as _scipy

    if not math.isfinite(se):
        return math.inf
    z = float(_scipy.norm.ppf(power ** (1.0 / max(1, attempts))))
    # a finite noise gives a finite answer: exp(700), far past any ratio a timer shows, is the
    # most it says (exp would overflow past 709)
    return float(math.exp(min(max(math.log(fail), critical(alpha, df) * se) + z * se, 700.0)))


def rate_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact binomial) two-sided interval of a rate seen `k` times in `n` trials:
    never narrower than the data allow, also at 0 of n and n of n, where a normal approximation
    (or Wilson's) is least trustworthy and where a gate's false fails and detections sit. (0, 1)
    for no trial."""
    from scipy import stats as _scipy

    if not 0 <= k <= n:
        raise ValueError(f"rate_interval: {k} of {n}")
    if n == 0:
        return 0.0, 1.0
    a = (1.0 - confidence) / 2
    low = 0.0 if k == 0 else float(_scipy.beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(_scipy.beta.ppf(1 - a, k + 1, n - k))
    return low, high


# --- unpaired (separate processes) ---------------------------------------------------------


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
    from scipy import stats as _scipy

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
    """Unpaired comparison of two sets of repeat medians (one process per side: a
    per-process offset is indistinguishable from a change here)."""
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
