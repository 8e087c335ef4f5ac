"""`perf grid --compile-cache` (perf/change/grid_cache.py): the grid's keyed cases compiled on a CPU
into a Triton cache, in shards that together hold every distinct kernel once (real compiles for
sm_90, ~20 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perf.change import grid_cache
from perf.checkout import ROOT
from perf.errors import ConfigError

pytestmark = pytest.mark.slow  # starts processes

ONLY = "*test_matches_reference?mqa-64-16-decode_1328-bfloat16-none-*"


def _compile(cache, *extra):
    # one compile worker: each spawned worker imports torch and Triton anew, and what the shards
    # hold does not depend on how many compiled them
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    done = subprocess.run([sys.executable, "-m", "perf", "grid", "--compile-cache", str(cache), "--vendor",
                           "nvidia", "--only", ONLY, "--processes", "1", *extra], cwd=ROOT,
                          env=dict(env, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _kernels(cache) -> set[str]:
    return {d for d in os.listdir(cache) if os.path.isdir(os.path.join(cache, d))}


def test_shards_split_the_distinct_kernels_and_together_hold_them_all(tmp_path):
    whole = _compile(tmp_path / "all")
    assert "5 keyed cases" in whole and "0 failed to compile" in whole, whole
    parts = [_kernels(tmp_path / "all")]
    for i in (1, 2):
        _compile(tmp_path / f"s{i}", "--shard", f"{i}/2")
        parts.append(_kernels(tmp_path / f"s{i}"))
    assert parts[0] and parts[1] | parts[2] == parts[0] and not parts[1] & parts[2]


@given(st.integers(1, 64).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n))))
def test_a_shard_is_one_of_n(pair):
    i, n = pair
    assert grid_cache.parse_shard(f"{i}/{n}") == (i - 1, n)


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2", ""])
def test_a_bad_shard_is_named(text):
    with pytest.raises(ConfigError, match="--shard"):
        grid_cache.parse_shard(text)


# --------------------------------------------------------------------------- the cache, moved


def _group(folder, name: str, children: dict) -> str:
    path = os.path.join(folder, f"__grp__{name}.json")
    with open(path, "w") as f:
        json.dump({"child_paths": children}, f)
    return path


def test_relocation_points_each_group_at_its_folder_and_drops_what_triton_cannot_read(tmp_path, monkeypatch):
    """A cache compiled elsewhere (the grid-compile jobs' workspace), moved here: every group names
    the files beside it, a group already right is left alone, and a group Triton's lookup would
    raise on (cut short, another shape) is removed, so that kernel compiles instead of failing its
    test. Triton's own lookup then finds the moved files and nothing raises."""
    import triton_compiles
    from triton.runtime.cache import FileCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    moved, right, cut, odd = (tmp_path / k for k in ("KEYMOVED", "KEYRIGHT", "KEYCUT", "KEYODD"))
    for folder in (moved, right, cut, odd):
        folder.mkdir()
        (folder / "k.cubin").write_bytes(b"\0")
        (folder / "k.json").write_text("{}")
    elsewhere = "/home/runner/work/repo/.grid-cache/nvidia/KEYMOVED"
    _group(moved, "k", {n: f"{elsewhere}/{n}" for n in ("k.cubin", "k.json")})
    kept = _group(right, "k", {n: str(right / n) for n in ("k.cubin", "k.json")})
    before = os.stat(kept).st_mtime_ns
    (cut / "__grp__k.json").write_text('{"child_paths": {"k.cubin": "/x/k.cu')
    _group(odd, "k", ["k.cubin"])  # not Triton's format: a list
    assert triton_compiles.relocate(str(tmp_path)) == 1
    assert triton_compiles.relocate(str(tmp_path)) == 0  # again (another xdist worker): nothing to do
    assert os.stat(kept).st_mtime_ns == before
    for folder in (moved, right):
        group = FileCacheManager(folder.name).get_group("k.json")
        assert group == {n: str(folder / n) for n in ("k.cubin", "k.json")}
    for folder in (cut, odd):
        assert not (folder / "__grp__k.json").exists()
        assert FileCacheManager(folder.name).get_group("k.json") is None  # a miss: compiled anew


def test_the_summary_says_how_many_compiles_a_precompiled_cache_should_have_saved(monkeypatch):
    """The one line a GPU grid ends with: compiles in the keyed cases (whose kernels a precompiled
    cache holds: with a working one, 0) apart from the others (other tests' kernels)."""
    from types import SimpleNamespace

    import triton_compiles

    def report(nodeid, compiled, loaded, when="call"):
        return SimpleNamespace(nodeid=f"tests/{nodeid}", when=when,
                               user_properties=[(triton_compiles.PROPERTY, (compiled, loaded))])

    lines = []
    module = "kernels/test_correctness.py"  # tests/grid_cases.py MODULE, under tests/
    stats = {"passed": [report(f"{module}::test_matches_reference[mqa-64-16-q1_kv1-bf16-none-naive]", 1, 2),
                        report(f"{module}::test_forced_config_matches_reference[none-x-parallel]", 2, 0),
                        report(f"{module}::test_locate_q_block_finds_every_block[a]", 4, 0),
                        report(f"{module}::test_matches_reference[z]", 8, 0, when="setup")],
             "skipped": [report("kernels/test_graph_replay.py::test_x", 0, 1)]}
    monkeypatch.setenv("TRITON_CACHE_DIR", "/c")
    triton_compiles.pytest_terminal_summary(SimpleNamespace(stats=stats, write_line=lines.append))
    assert lines == ["Triton kernels: 7 compiled in this session (3 of them in the grid's keyed cases), "
                     "3 loaded from the cache (/c)"]
