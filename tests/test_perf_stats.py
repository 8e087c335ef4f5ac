"""Statistics of the A/B on synthetic repeat medians with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from perf import stats


def _noisy(center: float, cv: float, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(center, center * cv, n)


def test_ratio_of_medians_ignores_outliers():
    base = [1.0] * 9 + [50.0]  # one stalled repeat
    head = [1.1] * 10
    assert stats.ratio_of_medians(base, head) == pytest.approx(1.1)


def test_bootstrap_interval_covers_the_true_ratio_and_shrinks_with_n():
    base, head = _noisy(1.0, 0.01, 10, 1), _noisy(1.05, 0.01, 10, 2)
    lo, hi = stats.bootstrap_ci(base, head, 2000, 0.95)
    assert lo < 1.05 < hi and hi - lo < 0.05
    lo2, hi2 = stats.bootstrap_ci(_noisy(1.0, 0.01, 100, 3), _noisy(1.05, 0.01, 100, 4), 2000, 0.95)
    assert hi2 - lo2 < hi - lo


def test_bootstrap_is_reproducible():
    base, head = _noisy(1.0, 0.02, 10, 1), _noisy(1.0, 0.02, 10, 2)
    assert stats.bootstrap_ci(base, head, seed=7) == stats.bootstrap_ci(base, head, seed=7)


def test_mann_whitney_directions():
    base = np.arange(10) + 100.0
    head = base + 20.0  # every head repeat slower than every base repeat
    p_slower, p_faster = stats.mann_whitney(base, head)
    assert p_slower < 1e-4 and p_faster > 0.99
    # exact one-sided minimum for 10 vs 10 is 1 / C(20, 10)
    assert p_slower == pytest.approx(1 / 184756, rel=1e-3)
    p_slower, p_faster = stats.mann_whitney(head, base)
    assert p_faster < 1e-4


def test_mann_whitney_identical_samples_give_no_evidence():
    assert stats.mann_whitney([1.0] * 10, [1.0] * 10) == (1.0, 1.0)


def test_compare_reports_p_in_direction_of_change():
    c = stats.compare(_noisy(1.0, 0.01, 10, 5), _noisy(0.9, 0.01, 10, 6))
    assert c.ratio < 1 and c.p_value == c.p_faster < 0.01
    assert c.n_base == c.n_head == 10


def test_cv():
    assert stats.cv([1.0, 1.0, 1.0]) == 0.0
    assert stats.cv([9.0, 11.0]) == pytest.approx(np.std([9.0, 11.0], ddof=1) / 10.0)


def test_gate_power_grows_with_effect_and_never_fails_below_threshold():
    # below the fail threshold the gate cannot fail, however significant the change
    assert stats.gate_power(0.002, 10, 1.04, 0.01, 1.05, sims=500) == 0.0
    low = stats.gate_power(0.01, 10, 1.055, 0.01, 1.05, sims=500)
    high = stats.gate_power(0.01, 10, 1.10, 0.01, 1.05, sims=500)
    assert low < high and high > 0.99


def test_min_detectable_effect_brackets_threshold_and_noise():
    quiet = stats.min_detectable_effect(0.001, 10, 0.01, 1.05, sims=500)
    noisy = stats.min_detectable_effect(0.03, 10, 0.01, 1.05, sims=500)
    assert 1.05 < quiet < 1.06 < noisy
    assert stats.gate_power(0.03, 10, noisy, 0.01, 1.05, sims=500) >= 0.95


def test_test_only_mde_scales_with_cv():
    one = stats.test_only_mde(0.01, 10, 0.01) - 1
    assert stats.test_only_mde(0.02, 10, 0.01) - 1 == pytest.approx(2 * one)
