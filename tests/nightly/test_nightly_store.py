"""The data branch: its layout and reader, a save that lands whatever other runners push,
and nothing half-written when a save is interrupted. Remotes are throwaway bare repositories."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf import git, results
from perf.errors import ConfigError
from perf.measure.timing import Samples
from perf.nightly import store

pytestmark = pytest.mark.slow  # starts processes

ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "driver": "580.159.04",
       "gpu_uuid": "GPU-1", "vbios": "96.00", "runtime": "CUDA 13.0", "torch": "2.11.0", "triton": "3.6.0",
       "clocks": {"start": {"sm_mhz": 1980, "mem_mhz": 2619, "throttle": []}, "end": None}}


def results_file(path: Path, machine: str, sha: str, day: str = "2026-11-20", value: float = 1.0,
                 env: dict | None = None) -> str:
    """A night's results file as `perf nightly run` writes it."""
    header = {"environment": {**ENV, "time": f"{day}T03:00:00+00:00", "commit": sha, **(env or {})},
              "nightly": {"commit": sha, "commit_date": f"{day}T01:00:00+00:00", "machine": machine}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with results.ResultsWriter(str(path), header, resume=False) as w:
        for r in range(3):
            w.record(variant="qblock", scenario="llama3-8b/decode/batch1-kv1024/block16", metric="graph",
                     repeat=r, samples=Samples((value, value, value)), config=[], digest="d")
    return str(path)


def sh(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def remote(tmp_path):
    """A bare remote with one commit on main, and a function making clones of it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    bare = tmp_path / "remote.git"
    sh(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    sh(tmp_path, "init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("x\n")
    sh(seed, "add", "-A")
    sh(seed, "commit", "-qm", "first")
    sh(seed, "push", "-q", str(bare), "main")

    def clone(name: str) -> Path:
        path = tmp_path / name
        sh(tmp_path, "clone", "-q", str(bare), str(path))
        return path

    clone.bare = bare
    return clone


def branch_files(bare: Path, branch: str = store.BRANCH) -> set[str]:
    out = sh(bare, "ls-tree", "-r", "--name-only", branch)
    return set(out.splitlines())


def night(tmp_path: Path, machine: str, day: str = "2026-11-20", value: float = 1.0) -> store.Tonight:
    path = results_file(tmp_path / f"{machine}-{value}" / "r.jsonl", machine, "a" * 40, day, value)
    return store.tonight(path)


# --- layout and reader -------------------------------------------------------------------------


def test_a_night_is_written_whole_and_read_back(tmp_path):
    data = tmp_path / "data"
    src = results_file(tmp_path / "r.jsonl", "h100-a_nvidia-h100", "a" * 40)
    fp = {**ENV, "gpu_model": ENV["gpu"]}
    n = store.write_night(str(data), "h100-a_nvidia-h100", "2026-11-20", src, fp, {"machines": []})
    assert Path(n.path) == data / "nights" / "h100-a_nvidia-h100" / "2026-11-20"
    assert sorted(os.listdir(n.path)) == ["alert.json", "fingerprint.json", "results.jsonl"]
    assert n.fingerprint()["driver"] == "580.159.04" and n.alert() == {"machines": []}
    assert n.results().medians()[("qblock", "llama3-8b/decode/batch1-kv1024/block16", "graph")] == [1.0] * 3
    # a second save of the night keeps what it does not replace
    store.write_night(str(data), "h100-a_nvidia-h100", "2026-11-20", src, None, None)
    assert store.nights(str(data))[0].alert() == {"machines": []}
    assert store.runners(str(data)) == ["h100-a_nvidia-h100"]


def test_folders_that_are_no_night_are_not_read(tmp_path):
    data = tmp_path / "data"
    src = results_file(tmp_path / "r.jsonl", "m", "a" * 40)
    store.write_night(str(data), "m", "2026-11-20", src, None, None)
    (data / "nights" / "m" / ".2026-11-21.xyz").mkdir()  # an interrupted write
    (data / "nights" / "m" / "2026-11-22").mkdir()  # no results
    assert [(n.runner, n.date) for n in store.nights(str(data))] == [("m", "2026-11-20")]
    store.clean(str(data))
    assert not (data / "nights" / "m" / ".2026-11-21.xyz").exists()


@pytest.mark.parametrize("folder", ["notes", "2026-13-45", "2099-01-01", "2026-02-30", "ré☃"])
def test_a_folder_that_is_no_night_is_refused_naming_it(tmp_path, folder):
    """Only `save` writes the store: another folder is refused in one line, never read as a night
    (a night dated 2099 would hide a silent runner from the heartbeat for ever)."""
    data = tmp_path / "data"
    src = results_file(tmp_path / "r.jsonl", "m", "a" * 40)
    store.write_night(str(data), "m", "2026-11-20", src, None, None)
    (data / "nights" / "m" / folder).mkdir()
    (data / "nights" / "m" / folder / store.RESULTS).write_text(Path(src).read_text())
    with pytest.raises(ConfigError, match=re.escape(f"{folder!r}")):
        store.nights(str(data))


@pytest.mark.parametrize("runner, date", [("../x", "2026-11-20"), ("m", "20261120"), ("", "2026-11-20"),
                                          ("a/b", "2026-11-20"), ("m\n", "2026-11-20"),
                                          ("m", "2026-11-20\n")])
def test_names_outside_the_layout_are_refused(tmp_path, runner, date):
    with pytest.raises(ConfigError):
        store.night_dir(str(tmp_path), runner, date)


def test_a_bad_fingerprint_or_alert_is_one_line_naming_the_file(tmp_path):
    data = tmp_path / "data"
    src = results_file(tmp_path / "r.jsonl", "m", "a" * 40)
    n = store.write_night(str(data), "m", "2026-11-20", src, {"driver": 580}, {"machines": {}})
    with pytest.raises(ConfigError, match="fingerprint.json: driver is 580"):
        n.fingerprint()
    with pytest.raises(ConfigError, match="alert.json: `machines` is not a list"):
        n.alert()
    with pytest.raises(ConfigError, match="not a checkout of the data branch"):
        store.check_data(str(tmp_path / "nowhere"))


def test_an_interrupted_write_leaves_the_old_night_whole(tmp_path, monkeypatch):
    data = tmp_path / "data"
    src = results_file(tmp_path / "r.jsonl", "m", "a" * 40, value=1.0)
    store.write_night(str(data), "m", "2026-11-20", src, {"driver": "old"}, None)
    newer = results_file(tmp_path / "r2.jsonl", "m", "a" * 40, value=2.0)
    real = store.files.write_json

    def interrupted(path, obj, *a, **k):
        real(path, obj, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(store.files, "write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.write_night(str(data), "m", "2026-11-20", newer, {"driver": "new"}, None)
    (n,) = store.nights(str(data))
    assert n.fingerprint()["driver"] == "old" and n.results().medians()[
        ("qblock", "llama3-8b/decode/batch1-kv1024/block16", "graph")] == [1.0] * 3
    assert os.listdir(data / "nights" / "m") == ["2026-11-20"]


def test_tonight_takes_the_machine_day_end_fingerprint_and_its_own_alert(tmp_path):
    path = results_file(tmp_path / "out" / "m-aaaaaaaa.jsonl", "m", "a" * 40, day="2026-11-24")
    (tmp_path / "out" / "m-aaaaaaaa.jsonl.fingerprint").write_text(json.dumps({**ENV, "clocks": {"end": {}}}))
    alert = {"alert": True, "machines": [{"machine": "m", "commit": "a" * 40, "alerts": []},
                                         {"machine": "other", "commit": "a" * 40, "alerts": [{}]}]}
    (tmp_path / "out" / "alert.json").write_text(json.dumps(alert))
    t = store.tonight(path, str(tmp_path / "out" / "alert.json"))
    assert (t.runner, t.date) == ("m", "2026-11-24") and t.fingerprint["clocks"] == {"end": {}}
    assert t.alert == {"alert": False, "machines": [alert["machines"][0]]}
    assert store.find_tonight(str(tmp_path / "out"), "a" * 40) == [path]


# --- save: git -----------------------------------------------------------------------------------


def test_the_first_save_makes_an_orphan_branch_and_later_ones_add_to_it(tmp_path, remote):
    a = remote("a")
    store.save(str(a), night(tmp_path, "runner-a_h100"))
    assert branch_files(remote.bare) == {"nights/runner-a_h100/2026-11-20/results.jsonl",
                                         "nights/runner-a_h100/2026-11-20/fingerprint.json"}
    assert sh(remote.bare, "rev-list", "--count", store.BRANCH) == "2"  # the orphan root and the night
    with pytest.raises(subprocess.CalledProcessError):  # no history shared with main
        sh(remote.bare, "merge-base", "main", store.BRANCH)
    store.save(str(a), night(tmp_path, "runner-a_h100", day="2026-11-21"))
    assert "nights/runner-a_h100/2026-11-21/results.jsonl" in branch_files(remote.bare)
    assert sh(a, "worktree", "list").count("\n") == 0  # the temporary worktree is gone


def _racing(monkeypatch, parties: int):
    """Make `parties` saves commit at the same time, each on the same tip: all but one push is refused."""
    barrier = threading.Barrier(parties, timeout=60)
    real = git.commit_paths
    first = set()

    def commit_paths(root, paths, message, author="perf-harness"):
        sha = real(root, paths, message, author)
        if root not in first:  # only the first commit of each save waits for the others
            first.add(root)
            barrier.wait()
        return sha

    monkeypatch.setattr(git, "commit_paths", commit_paths)
    monkeypatch.setattr(git, "RETRY_S", 0.01)


@pytest.mark.parametrize("branch_exists", [False, True])
def test_two_runners_saving_the_same_night_both_land(tmp_path, remote, monkeypatch, branch_exists):
    a, b = remote("a"), remote("b")
    if branch_exists:
        store.save(str(a), night(tmp_path, "runner-a_h100", day="2026-11-19"))
    _racing(monkeypatch, 2)
    nights = {"a": night(tmp_path, "runner-a_h100"), "b": night(tmp_path, "runner-b_h100")}
    said, errors = [], []

    def run(clone, key):
        try:
            store.save(str(clone), nights[key], say=said.append)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c, k)) for c, k in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    landed = branch_files(remote.bare)
    assert {f"nights/runner-{k}_h100/2026-11-20/results.jsonl" for k in "ab"} <= landed
    assert any("push refused" in line for line in said)  # one of them was second, and retried


def test_one_runner_saving_its_night_twice_at_once_keeps_one_whole_night(tmp_path, remote, monkeypatch):
    a, b = remote("a"), remote("b")
    _racing(monkeypatch, 2)
    first, second = night(tmp_path, "m", value=1.0), night(tmp_path, "m", value=2.0)
    said = []
    threads = [threading.Thread(target=store.save, args=(str(c), n), kwargs={"say": said.append})
               for c, n in ((a, first), (b, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = sh(remote.bare, "show", f"{store.BRANCH}:nights/m/2026-11-20/results.jsonl")
    assert text in {Path(n.results_path).read_text().strip() for n in (first, second)}
    assert any("push refused" in line for line in said)  # the rebase conflicted: the night was made again
    assert sum(line.startswith("saved ") for line in said) == 2


def test_an_interrupted_save_changes_nothing_and_a_rerun_lands(tmp_path, remote, monkeypatch):
    a = remote("a")
    store.save(str(a), night(tmp_path, "m", day="2026-11-19"))
    before = sh(remote.bare, "rev-parse", store.BRANCH)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(git, "push_retrying", interrupted)
    tonight = night(tmp_path, "m")
    with pytest.raises(KeyboardInterrupt):
        store.save(str(a), tonight)
    assert sh(remote.bare, "rev-parse", store.BRANCH) == before
    assert sh(a, "worktree", "list").count("\n") == 0
    monkeypatch.undo()
    store.save(str(a), tonight)
    assert "nights/m/2026-11-20/results.jsonl" in branch_files(remote.bare)


def test_a_push_that_keeps_failing_ends_in_one_line(tmp_path, remote, monkeypatch):
    a = remote("a")
    monkeypatch.setattr(git, "RETRY_S", 0.0)
    sh(a, "remote", "set-url", "--push", "origin", str(tmp_path / "gone.git"))
    with pytest.raises(ConfigError, match="not pushed after 3 tries"):
        store.save(str(a), night(tmp_path, "m"), retries=2)
    with pytest.raises(ConfigError, match="--remote nowhere: cannot reach it"):
        store.save(str(a), night(tmp_path, "m"), remote="nowhere")


def test_data_is_kept_a_checkout_of_the_branch(tmp_path, remote):
    a, b = remote("a"), remote("b")
    data = tmp_path / "data"
    store.save(str(a), night(tmp_path, "runner-a"), data=str(data))
    assert [n.runner for n in store.nights(str(data))] == ["runner-a"]
    store.save(str(b), night(tmp_path, "runner-b"))
    with store.checkout(str(a), data=str(data)) as folder:
        assert [n.runner for n in store.nights(folder)] == ["runner-a", "runner-b"]
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "f").write_text("x")
    with pytest.raises(ConfigError, match="is not a checkout of the data branch"), \
            store.checkout(str(a), data=str(tmp_path / "taken")):
        pass


# --- the history is the branch's: losing a machine's own copy loses nothing ---------------------------


def test_the_history_rebuilt_from_the_branch_is_the_local_store_s(tmp_path, remote):
    from perf.cli import main
    from perf.nightly import history
    from tests.nightly.test_nightly import MACHINE, ROOT, SCENARIOS, _conf, synthetic

    a = remote("a")
    res = synthetic(tmp_path, 5, cv=0.01, steps={("naive", SCENARIOS[2], "graph"): 1.5})
    for n in store.nights(str(res), MACHINE):
        store.save(str(a), store.tonight(n.results_path, machine=MACHINE))
    (kept,) = history.load_data(str(res))
    args = ["--thresholds", str(ROOT / "thresholds.yaml"), "--config", _conf(tmp_path, tmp_path / "asv")]
    assert main(["alert", *args, "--data", str(res), "--out", str(tmp_path / "from-local")]) == 1
    shutil.rmtree(res)  # the machine's own copy is gone
    data = tmp_path / "data"
    with store.checkout(str(a), data=str(data)):
        pass
    (rebuilt,) = history.load_data(str(data))
    assert rebuilt.machine == MACHINE
    assert [c.sha for c in rebuilt.commits] == [c.sha for c in kept.commits]
    assert rebuilt.series == kept.series and rebuilt.notes == kept.notes
    assert [n.date for n in rebuilt.nights] == [f"2026-11-{d:02d}" for d in range(1, 6)]
    assert main(["alert", *args, "--data", str(data), "--out", str(tmp_path / "from-branch")]) == 1
    alerts = [json.loads((tmp_path / d / "alert.json").read_text())["machines"][0]["alerts"]
              for d in ("from-local", "from-branch")]
    assert alerts[0] == alerts[1] and len(alerts[0]) == 1


def test_a_commit_measured_on_two_nights_is_its_newest_night_s(tmp_path):
    from perf.nightly import history

    data = tmp_path / "data"
    for day, value in (("2026-11-20", 1.0), ("2026-11-21", 2.0)):
        src = results_file(tmp_path / day / "r.jsonl", "m", "a" * 40, day, value)
        store.write_night(str(data), "m", day, src, {**ENV, "driver": f"d{day}"}, None)
    (h,) = history.load_data(str(data))
    assert len(h.commits) == 1 and h.value("qblock", "llama3-8b/decode/batch1-kv1024/block16", "graph") == 2.0
    assert [n.fingerprint["driver"] for n in h.nights] == ["d2026-11-20", "d2026-11-21"]


def test_nightly_save_and_checkout_commands(tmp_path, remote, capsys):
    from perf.cli import main
    from tests.nightly.test_nightly import ROOT

    a = remote("a")
    conf = json.loads((ROOT / "asv.conf.json").read_text())
    (a / "asv.conf.json").write_text(json.dumps(conf))
    sha = sh(a, "rev-parse", "HEAD")
    out = tmp_path / "out"
    results_file(out / f"runner-a_h100-{sha[:8]}.jsonl", "runner-a_h100", sha, "2026-11-25")
    data = tmp_path / "data"
    args = ["--config", str(a / "asv.conf.json"), "--out", str(out)]
    assert main(["nightly", "save", *args, "--data", str(data), "--retries", "1"]) == 0
    assert [(n.runner, n.date) for n in store.nights(str(data))] == [("runner-a_h100", "2026-11-25")]
    assert "saved nights/runner-a_h100/2026-11-25" in capsys.readouterr().out
    assert main(["nightly", "checkout", *args, "--data", str(tmp_path / "d2")]) == 0
    assert "1 nights of 1 runners" in capsys.readouterr().out
    assert main(["nightly", "save", *args, "--out", str(tmp_path / "empty")]) == 2
    assert "no results of commit" in capsys.readouterr().err
    assert main(["nightly", "save", *args, "--retries", "-1"]) == 2


def test_merged_gpu_shards_keep_every_process_s_end_fingerprint(tmp_path):
    from perf import fingerprint
    from perf.nightly import shard
    from tests.nightly.test_shard import OF, _shard_file

    paths = [str(_shard_file(tmp_path / "1.jsonl", 1, 2, OF, OF[:2])),
             str(_shard_file(tmp_path / "2.jsonl", 2, 2, OF, OF[2:]))]
    for k, path in enumerate(paths):
        fingerprint.write_end(path, {**ENV, "gpu_uuid": f"GPU-{k}"})
    out = str(tmp_path / "out.jsonl")
    shard.merge(paths, out, shard.GPU_KEY)
    assert [p["gpu_uuid"] for p in fingerprint.read_end(out)["processes"]] == ["GPU-0", "GPU-1"]


def test_a_recorded_night_is_put_into_the_store_and_asv_is_not_run(tmp_path, monkeypatch):
    import argparse

    from perf import fingerprint
    from perf import nightly as nightly_cli
    from perf.nightly import asvrun, history

    monkeypatch.setattr(asvrun, "asv", lambda *a, **k: pytest.fail("recording a night ran asv"))
    sha = "b" * 40
    artifacts = tmp_path / "out"
    out = results_file(artifacts / f"runner-a_h100-{sha[:8]}.jsonl", "runner-a_h100", sha, "2026-11-25")
    fingerprint.write_end(out, {**ENV, "driver": "580.200"})
    data = tmp_path / "data"
    args = argparse.Namespace(out=str(artifacts), data=str(data), no_compile_time=True)
    assert nightly_cli._record(args, {}, "runner-a_h100", sha, out) == 0
    (n,) = store.nights(str(data))
    assert (n.runner, n.date, n.fingerprint()["driver"]) == ("runner-a_h100", "2026-11-25", "580.200")
    (h,) = history.load_data(str(data))
    assert h.latest.sha == sha and h.stored[sha].path == n.path
    # without --data: the local store beside asv's results folder (store.local)
    args.data = None
    conf = {"_results_dir": str(tmp_path / "asv" / "results")}
    assert nightly_cli._record(args, conf, "runner-a_h100", sha, out) == 0
    assert [m.runner for m in store.nights(store.local(conf["_results_dir"]))] == ["runner-a_h100"]
    assert store.local(conf["_results_dir"]) == str(tmp_path / "asv" / store.LOCAL)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=0, max_size=30), st.text(min_size=0, max_size=12))
def test_a_night_folder_is_always_inside_nights_of_its_runner(runner, date):
    try:
        path = store.night_dir("/data", runner, date)
    except ConfigError:
        return
    assert os.path.dirname(os.path.dirname(path)) == "/data/nights"
    assert os.path.normpath(path) == path and ".." not in path.split(os.sep)
    assert not any(c.isspace() for c in path)
