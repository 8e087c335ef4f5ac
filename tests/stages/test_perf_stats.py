"""Statistics of the A/B on synthetic data with known answers.

The gate's data: per process, paired log ratios of rounds. The process is the unit of
independence, so a per-process offset that pairing does not cancel must widen the
uncertainty, never pass for a change; a real shift must still be found.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf import schema, stats
from perf.latency.analysis import stored_detectable


def _groups(rng, effect: float, tau: float, sigma: float, processes: int = 3, rounds: int = 10):
    """Paired log ratios: a true effect, a random offset per process, noise per round."""
    return [rng.normal(effect + rng.normal(0, tau), sigma, rounds) for _ in range(processes)]


def test_per_process_offset_is_not_called_significant():
    """A/A with processes offset by 2 % (sd) and rounds 0.3 % apart: rounds alone would call
    almost every run significant, the process-level test keeps to alpha."""
    rng = np.random.default_rng(1)
    runs = [_groups(rng, 0.0, tau=0.02, sigma=0.003) for _ in range(400)]
    p = np.array([stats.process_test(g)[0] for g in runs])
    assert (p < 0.01).mean() <= 0.02  # alpha 0.01, sampling error of 400 runs
    # The old design on the same noise: one process per side, its 10 repeat medians against
    # the other's (Mann-Whitney U): the offset between the two processes is "significant"
    # in about half of the A/A runs (one direction).
    old = [stats.mann_whitney(rng.normal(rng.normal(0, 0.02), 0.003, 10),
                              rng.normal(rng.normal(0, 0.02), 0.003, 10))[0] < 0.01 for _ in range(400)]
    assert np.mean(old) > 0.3


def test_planted_three_percent_shift_is_significant():
    rng = np.random.default_rng(2)
    for _ in range(50):
        groups = _groups(rng, math.log(1.03), tau=0.002, sigma=0.005)
        c = stats.paired(groups, resamples=500)
        assert c.p_slower < 0.01 and c.p_faster > 0.99
        assert c.ratio == pytest.approx(1.03, abs=0.006)
        assert c.ci_low < 1.03 < c.ci_high or abs(c.ratio - 1.03) < 0.004


def test_calibrated_variance_is_a_floor_for_the_test():
    """Three processes that happen to agree closely: this run's variance is tiny, the
    calibration knows processes differ more; the test must use the larger."""
    groups = [np.full(10, 0.01) + d for d in (-1e-5, 0.0, 1e-5)]
    p_run, _, se_run, _, src_run = stats.process_test(groups)
    p_cal, _, se_cal, df, src_cal = stats.process_test(groups, calibrated_var=0.01 ** 2, calibrated_df=5)
    assert src_run == "this run" and p_run < 1e-6
    assert src_cal == "calibrated" and se_cal == pytest.approx(0.01 / math.sqrt(3)) and df == 5 + 2
    assert p_cal > 0.05
    # a run noisier than the calibration raises the variance: pooled by degrees of freedom
    noisy = [np.full(10, x) for x in (-0.05, 0.0, 0.05)]
    _, _, se, df, src = stats.process_test(noisy, calibrated_var=1e-8, calibrated_df=4)
    assert src == "calibrated, raised by this run" and df == 6
    assert se == pytest.approx(math.sqrt((4 * 1e-8 + 2 * 0.05 ** 2) / 6 / 3))


def test_calibrated_test_keeps_to_alpha_when_the_run_is_as_noisy_as_calibrated():
    rng = np.random.default_rng(8)
    sigma, tau, r = 0.003, 0.002, 10
    cal_var = tau ** 2 + sigma ** 2 / r
    p = [stats.process_test(_groups(rng, 0.0, tau, sigma), calibrated_var=cal_var, calibrated_df=4)[0]
         for _ in range(2000)]
    assert np.mean(np.array(p) < 0.01) <= 0.015


def test_noise_components_recover_sigma_and_tau():
    rng = np.random.default_rng(3)
    groups = _groups(rng, 0.0, tau=0.004, sigma=0.002, processes=200, rounds=20)
    sigma, tau = stats.noise_components(groups)
    assert sigma == pytest.approx(0.002, rel=0.05)
    assert tau == pytest.approx(0.004, rel=0.15)
    # no process effect: tau near zero
    sigma0, tau0 = stats.noise_components(_groups(rng, 0.0, 0.0, 0.002, processes=200, rounds=20))
    assert tau0 < 0.0005 and sigma0 == pytest.approx(0.002, rel=0.05)


def test_gate_sigma_matches_the_spread_of_simulated_gates():
    rng = np.random.default_rng(4)
    sigma, tau, p, r = 0.003, 0.001, 3, 10
    estimates = [np.mean([g.mean() for g in _groups(rng, 0.0, tau, sigma, p, r)]) for _ in range(3000)]
    assert np.std(estimates) == pytest.approx(stats.gate_sigma(sigma, tau, p, r), rel=0.05)


def test_hierarchical_bootstrap_covers_and_is_reproducible():
    rng = np.random.default_rng(5)
    covered = []
    for _ in range(200):
        groups = _groups(rng, math.log(1.05), tau=0.002, sigma=0.004, processes=8)
        lo, hi = stats.hierarchical_bootstrap(groups, 500, 0.95, seed=7)
        covered.append(lo < 1.05 < hi)
        assert hi - lo < 0.02
    # percentile intervals over few top-level units run a little short of their level
    assert np.mean(covered) > 0.85
    assert stats.hierarchical_bootstrap(groups, 500, 0.95, seed=7) == (lo, hi)


def test_min_detectable_is_what_the_gate_catches_95_percent_of_the_time():
    """Simulate the gate's rule (estimate beyond log(fail) and t beyond critical, twice)
    at the stated effect: about 95 % of runs fail."""
    se, fail, alpha, df = 0.002, 1.01, 0.01, 2.0
    mde = stats.min_detectable(se, fail, alpha, df, power=0.95, attempts=2)
    crit = stats.critical(alpha, df)
    rng = np.random.default_rng(6)
    est = rng.normal(math.log(mde), se, size=(20000, 2))
    caught = np.all((est > math.log(fail)) & (est / se > crit), axis=1).mean()
    assert caught == pytest.approx(0.95, abs=0.01)
    assert stats.min_detectable(math.inf, fail, alpha, df) == math.inf
    assert stats.min_detectable(1e-6, 1.05, alpha, math.inf) == pytest.approx(1.05, abs=1e-4)


def test_paired_needs_data():
    with pytest.raises(ValueError):
        stats.paired([])
    one = stats.paired([np.array([0.01, 0.02])])
    assert one.p_slower == 1.0 and one.n_processes == 1  # one process: no test


# --- unpaired (separate processes: perf compare, the nightly alert) -------------------------

def _noisy(center: float, cv: float, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(center, center * cv, n)


def test_ratio_of_medians_ignores_outliers():
    assert stats.ratio_of_medians([1.0] * 9 + [50.0], [1.1] * 10) == pytest.approx(1.1)


def test_bootstrap_interval_covers_the_true_ratio():
    lo, hi = stats.bootstrap_ci(_noisy(1.0, 0.01, 10, 1), _noisy(1.05, 0.01, 10, 2), 2000, 0.95)
    assert lo < 1.05 < hi and hi - lo < 0.05


def test_mann_whitney_directions_and_exact_minimum():
    base = np.arange(10) + 100.0
    p_slower, p_faster = stats.mann_whitney(base, base + 20.0)
    assert p_slower == pytest.approx(1 / 184756, rel=1e-3) and p_faster > 0.99
    assert stats.mann_whitney([1.0] * 10, [1.0] * 10) == (1.0, 1.0)


def test_compare_reports_p_in_direction_of_change():
    c = stats.compare(_noisy(1.0, 0.01, 10, 5), _noisy(0.9, 0.01, 10, 6))
    assert c.ratio < 1 and c.p_value == c.p_faster < 0.01


def test_cv():
    assert stats.cv([1.0, 1.0, 1.0]) == 0.0
    assert stats.cv([9.0, 11.0]) == pytest.approx(np.std([9.0, 11.0], ddof=1) / 10.0)


@settings(deadline=None)  # the first example imports scipy.stats
@given(se=st.one_of(st.floats(0, 1e4), st.just(math.inf), st.just(math.nan)), fail=st.floats(1.0, 10.0),
       alpha=st.floats(1e-6, 0.5), df=st.one_of(st.floats(1, 1e6), st.just(math.inf)),
       attempts=st.integers(1, 4))
def test_a_stored_smallest_detectable_slowdown_is_one_the_findings_reader_takes(se, fail, alpha, df,
                                                                                 attempts):
    """Whatever the noise (an interpreter A/A of two processes on a loaded machine reaches a
    standard error of several log units), what the gate writes its reader accepts."""
    stored = stored_detectable(stats.min_detectable(se, fail, alpha, df, attempts=attempts))
    assert schema.or_none(schema.ratio)(stored), stored
