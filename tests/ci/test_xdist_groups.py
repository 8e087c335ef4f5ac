"""`--dist loadgroup` really groups with the pytest and pytest-xdist this environment installed.

CI runs the suite as `pytest -n auto --dist loadgroup` (noxfile.py), and two things rely on the
`xdist_group` mark keeping its tests on one worker: the golden-output capture
(tests/cli/test_outputs_unchanged.py: one worker captures, no other idles on its lock) and the GPU
grid's cases that compile the same kernels (tests/kernels/test_correctness.py). xdist groups by
suffixing a grouped test's node id with "@<group>" in the worker; pytest 9.2 keeps node ids in a
structured field that xdist 3.8 does not write, so nothing was grouped, silently (every test
still passed, round-robin). pyproject.toml's `test` extra pins a pair that groups; this runs a
tiny session of that pair in a child process, as CI passes the options, and reads where each
test ran.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest

pytest.importorskip("xdist")
pytestmark = pytest.mark.slow  # starts a pytest session

# a module-level mark (as the golden outputs use) and per-case marks (as the correctness grid does)
WHOLE_MODULE = """\
import pytest
pytestmark = pytest.mark.xdist_group("outputs")
@pytest.mark.parametrize("i", range(4))
def test_case(i):
    pass
"""
PER_CASE = """\
import pytest
def _params():
    for i in range(8):
        yield pytest.param(i, marks=[pytest.mark.xdist_group(f"kernel{i % 2}")] if i < 6 else [])
@pytest.mark.parametrize("i", list(_params()))
def test_case(i):
    pass
@pytest.mark.parametrize("i", range(6))
def test_alone(i):
    pass
"""
RAN = re.compile(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)")


def test_loadgroup_keeps_each_group_on_one_worker_and_says_so_in_its_ids(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "test_whole_module.py").write_text(WHOLE_MODULE, encoding="utf-8")
    (tmp_path / "test_per_case.py").write_text(PER_CASE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", "-v", "-c", "pytest.ini", "--rootdir", "."], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    where = {m[2]: m[1] for m in map(RAN.match, done.stdout.splitlines()) if m}
    assert len(where) == 4 + 8 + 6, done.stdout[-3000:]
    workers = defaultdict(set)
    for nodeid, worker in where.items():
        workers[nodeid.rpartition("@")[2] if "@" in nodeid.rpartition("]")[2] else None].add(worker)
    grouped = {g: sorted(w) for g, w in workers.items() if g is not None}
    import xdist

    pair = f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__}"
    assert set(grouped) == {"outputs", "kernel0", "kernel1"}, \
        f"{pair}: grouped tests' node ids carry no @group, so nothing is grouped: {sorted(where)}"
    assert all(len(w) == 1 for w in grouped.values()), f"{pair}: a group ran on several workers: {grouped}"
    assert sum(1 for n in where if "@" not in n) == 2 + 6  # the unmarked cases are nobody's group


def test_the_gpu_job_installs_the_pair_the_test_extra_pins():
    """The GPU job (perf/ci/jobs.py) installs pytest and pytest-xdist beside the vendor image's torch:
    the same pair as pyproject.toml's test extra, or its grid's groups would not group there."""
    import tomllib

    from perf.ci import jobs

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    pinned = {p for p in extra if p.startswith(("pytest==", "pytest-xdist=="))}
    assert set(jobs.PYTEST_PAIR) == pinned and len(pinned) == 2
    assert all(p in jobs.GPU_JOB_PACKAGES for p in pinned)
