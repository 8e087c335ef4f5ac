"""Creep: a level that moved over many nights in steps each too small for the nightly alert.

The alert (perf/nightly/alert.py) compares one night with the week before it, so a case that
gets 0.4 % slower every night never crosses its threshold on any night, yet is 5 % slower
after twelve. This pass looks at a case's whole series at once: the median of each night's
repeat medians, in log units, fitted with a piecewise-constant function by asv's own step
detector (`asv.step_detect.solve_potts_approx`, the Potts model asv's "Regressions" page
uses). Creep is a persistent level change made of steps each below the alert's floor:

- the fit has at least one step after its first level (the baseline), a level held for at least
  MIN_BASELINE nights (a shorter first level is left out and the rest fitted again);
- every fitted step is smaller than the case's fail ratio (a larger one is a step, which the
  alert and attribution own);
- the last PERSIST nights, on average, lie above the baseline by at least the creep floor (the
  vendor's warn ratio): a level the series holds, not one bad night.

The span is from the first night after the baseline to the newest; the issue names the commits
measured in it. The penalty of a step in the fit is GAMMA_K x sigma x ln(n), sigma the series'
own night-to-night noise (the median absolute difference of consecutive nights, scaled to a
standard deviation, robust to the steps themselves). asv's automatic penalty
(`detect_steps`) was tried first and fits a ramp as correlated noise with no step at all (a
4.8 % ramp over 12 nights, 0.2-0.7 % noise: one segment), so the penalty is set from the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Penalty per step in units of sigma x ln(n): 4, the scale of asv's own default (its BIC-like
# beta = 4 ln(n) / n). Default chosen by reasoning; on a flat series of 35 nights at 0.2-0.7 %
# noise it fits one level, on a 0.4 %/night ramp a staircase (checked 2026-11-26, numpy seeds 0-1).
GAMMA_K = 4.0
# Nights the new level must hold (their mean is compared with the baseline): two, as asv's
# detect_regressions asks a step to persist for two commits. Default chosen by reasoning.
PERSIST = 2
MIN_NIGHTS = 8  # fewer nights cannot tell a baseline from a drift (a week and one night; by reasoning)
# Nights the baseline (the first fitted level) must span: one more than PERSIST, so that a level held
# as long as a new level must hold (a two-night move of the machine) is never the baseline. A
# shorter first level is left out and the rest fitted again (replay seed 2013: a runner's first
# night 3.5 % faster fitted alone as the baseline, the flat nights after it named creep). By reasoning.
MIN_BASELINE = PERSIST + 1
_MAD_TO_SIGMA = 1.4826 / math.sqrt(2)  # MAD of differences of iid normals -> their sigma


@dataclass(frozen=True)
class Creep:
    """A creep in one series: where it starts (index of the first night above the baseline), the
    baseline and newest levels (ratios to the baseline are exp of their difference), the fitted
    steps (index, ratio) and the noise the penalty was set from."""

    start: int
    baseline: float  # log level of the first segment
    level: float  # mean log level of the last PERSIST nights
    steps: tuple[tuple[int, float], ...]
    sigma: float

    @property
    def ratio(self) -> float:
        return math.exp(self.level - self.baseline)


def noise(logs: list[float]) -> float:
    """The night-to-night noise of a series in log units (module docstring), never 0."""
    diffs = sorted(abs(b - a) for a, b in zip(logs, logs[1:]))
    if not diffs:
        return 1e-6
    mid = len(diffs) // 2
    mad = diffs[mid] if len(diffs) % 2 else 0.5 * (diffs[mid - 1] + diffs[mid])
    return max(mad * _MAD_TO_SIGMA, 1e-6)


def fit(logs: list[float], sigma: float) -> tuple[list[int], list[float]]:
    """asv's Potts fit of `logs`: (right ends, levels) of its segments."""
    try:
        from asv.step_detect import solve_potts_approx
    except ImportError:
        from perf.errors import ConfigError

        raise ConfigError("the creep pass needs asv (pip install -e .[nightly])") from None
    n = len(logs)
    rights, levels, _ = solve_potts_approx(list(logs), [1.0] * n, gamma=GAMMA_K * sigma * math.log(n))
    return list(rights), list(levels)


def find(levels: list[float], floor: float, step_limit: float) -> Creep | None:
    """The creep of a series of nightly levels (ms, oldest first), or None. `floor`: the smallest
    total slowdown (ratio) that counts; `step_limit`: the ratio at which a single fitted step is
    the alert's business, not creep."""
    if any(not (x > 0) for x in levels):
        return None
    logs, skipped = [math.log(x) for x in levels], 0
    while len(logs) >= MIN_NIGHTS:
        sigma = noise(logs)
        rights, fitted = fit(logs, sigma)
        if len(fitted) < 2 or rights[0] >= MIN_BASELINE:
            break
        logs, skipped = logs[rights[0]:], skipped + rights[0]  # too short to be a baseline
    else:
        return None
    if len(fitted) < 2:
        return None
    steps = tuple((rights[i], math.exp(fitted[i + 1] - fitted[i])) for i in range(len(fitted) - 1))
    if any(r >= step_limit or r <= 1 / step_limit for _, r in steps):
        return None
    level = sum(logs[-PERSIST:]) / PERSIST
    if level - fitted[0] < math.log(floor) or fitted[-1] - fitted[0] < math.log(floor) / 2:
        return None
    return Creep(start=skipped + rights[0], baseline=fitted[0], level=level,
                 steps=tuple((skipped + i, r) for i, r in steps), sigma=sigma)
