"""The launch-cost calibration's reader of pytest-benchmark's output (perf/latency/calibrate.py):
every median bounded (perf/schema.py), every variant named by the one rule, each benchmark once."""

from __future__ import annotations

import json

import pytest

from perf.errors import ConfigError
from perf.latency.calibrate import read_launch_cost


def _bench(variant: str | None, median) -> dict:
    return {"name": f"test_launch_cost[{variant}]", "params": {"variant": variant} if variant else None,
            "stats": {"median": median}}


def _write(tmp_path, *benchmarks) -> str:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"benchmarks": list(benchmarks)}))
    return str(path)


def test_a_good_output_is_read_with_the_anchors_by_name(tmp_path):
    path = _write(tmp_path, _bench("naive", 2e-5), _bench(None, 3e-5))
    assert read_launch_cost(path) == [("naive", 2e-5), ("test_launch_cost[None]", 3e-5)]


@pytest.mark.parametrize("bench, needle", [
    (_bench("naive", float("nan")), "stats.median is nan"),
    (_bench("naive", -3), "stats.median is -3"),
    (_bench("naive", 0), "stats.median is 0"),
    (_bench("naive", 1e308), "stats.median is 1e+308"),
    (_bench("../../x", 1e-5), "params.variant '../../x'"),
    (_bench("stätic_grid☃", 1e-5), "params.variant 'stätic_grid☃'"),
    ({"name": "x"}, "no benchmark with stats"),
])
def test_a_bad_benchmark_is_one_line_naming_it(tmp_path, bench, needle):
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]") as e:
        read_launch_cost(_write(tmp_path, bench))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_benchmark_given_twice_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"benchmarks\[1\] repeats the benchmark of benchmarks\[0\]"):
        read_launch_cost(_write(tmp_path, _bench("naive", 1e-5), _bench("naive", 1e-5)))
