"""The nightly workflow over several runners (thresholds.yaml runners.nightly_shards), and the GPU
test job over every GPU of its runner: generated from data, checked here without a runner."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest
import yaml

from perf.ci import jobs
from perf.ci import workflows as wf
from perf.ci.steps import HOSTED_RUNNER
from perf.errors import ConfigError
from perf.nightly import DEFAULT_OUT, shard
from perf.thresholds import load_thresholds

ROOT = Path(__file__).resolve().parents[2]
THRESHOLDS = ROOT / "thresholds.yaml"


def _thresholds(tmp_path: Path, shards: dict[str, object]) -> Path:
    data = yaml.safe_load(THRESHOLDS.read_text(encoding="utf-8"))
    for vendor, m in shards.items():
        data[vendor]["runners"]["nightly_shards"] = m
    path = tmp_path / "thresholds.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _nightly(tmp_path: Path, **shards) -> dict:
    files = wf.generate(_thresholds(tmp_path, shards), ROOT)
    return yaml.safe_load(files[".github/workflows/nightly.yml"])


def test_committed_nightly_runs_each_vendor_on_one_runner_as_before():
    th = load_thresholds(THRESHOLDS)
    assert all(v.runners.nightly_shards == 1 for v in th.vendors.values())
    doc = yaml.safe_load((ROOT / ".github/workflows/nightly.yml").read_text(encoding="utf-8"))
    assert set(doc["jobs"]) == {"nightly-nvidia", "nightly-nvidia-issues", "nightly-amd",
                                "nightly-amd-issues", "pages", "heartbeat"}
    assert all("strategy" not in job for job in doc["jobs"].values())


def test_a_vendor_over_three_runners_gets_a_matrix_and_a_merge_job(tmp_path):
    doc = _nightly(tmp_path, nvidia=3)
    jobs_ = doc["jobs"]
    assert set(jobs_) == {"nightly-nvidia", "nightly-nvidia-merge", "nightly-nvidia-remeasure",
                          "nightly-nvidia-issues", "nightly-amd", "nightly-amd-issues", "pages", "heartbeat"}
    measure, merge = jobs_["nightly-nvidia"], jobs_["nightly-nvidia-merge"]

    assert measure["strategy"] == {"fail-fast": False, "matrix": {"shard": [1, 2, 3]}}
    assert measure["env"]["NIGHTLY_SHARD"] == "${{ matrix.shard }}/3"
    assert "${{ matrix.shard }}" in measure["env"]["CI_CONTAINER"]  # runners may share a host
    assert "${{ matrix.shard }}" in measure["concurrency"]["group"]
    run = [s["run"] for s in measure["steps"] if s.get("id") == "nightly"]
    assert run and run[0].endswith('nox --no-venv -s nightly -- run --shard "$NIGHTLY_SHARD"')
    upload = [s for s in measure["steps"] if "upload-artifact" in s.get("uses", "")]
    assert [u["with"]["path"] for u in upload] == [f"{jobs.NIGHTLY_PARTS_DIR}/"]
    # the folder the CLI writes a part into is the one the job uploads
    assert os.path.join(DEFAULT_OUT, shard.PARTS_DIR) == jobs.NIGHTLY_PARTS_DIR
    part_names = [upload[0]["with"]["name"].replace("${{ matrix.shard }}", str(i)) for i in (1, 2, 3)]

    assert merge["needs"] == "nightly-nvidia" and merge["runs-on"] == HOSTED_RUNNER
    download = [s for s in merge["steps"] if "download-artifact" in s.get("uses", "")][0]["with"]
    assert all(fnmatch.fnmatchcase(n, download["pattern"]) for n in part_names)
    assert not fnmatch.fnmatchcase("nightly-nvidia-results", download["pattern"])
    assert download["merge-multiple"] is True and download["path"] == jobs.NIGHTLY_PARTS_IN
    runs = "\n".join(s.get("run", "") for s in merge["steps"])
    assert f"-s nightly -- --merge-shards {jobs.NIGHTLY_PARTS_IN}" in runs and "-s alert" in runs
    assert "torch" not in runs and "triton" not in runs  # a hosted runner: nothing GPU-side installed
    assert [s["with"]["name"] for s in merge["steps"] if "upload-artifact" in s.get("uses", "")] == \
        ["site-nvidia", "nightly-nvidia-results"]

    # The merge job alerts without a GPU; the alerts are re-measured back on a GPU runner, from the
    # history the merge job saved and the site and results it uploaded, and re-uploaded.
    (alert_step,) = [s for s in merge["steps"] if s.get("id") == "alert"]
    assert alert_step["continue-on-error"] is True and merge["outputs"]["alert"] == \
        "${{ steps.alert.outcome == 'failure' }}"
    again = jobs_["nightly-nvidia-remeasure"]
    assert again["needs"] == "nightly-nvidia-merge" and again["runs-on"] == measure["runs-on"]
    assert "needs.nightly-nvidia-merge.outputs.alert == 'true'" in again["if"]
    restore = [s for s in again["steps"] if "cache/restore" in s.get("uses", "")][0]["with"]
    saved = [s for s in merge["steps"] if "cache/save" in s.get("uses", "")][0]["with"]
    assert restore["key"] == saved["key"] and restore["path"] == saved["path"]
    # The re-measure reads the history from the data branch; the merge job reads and saves it.
    assert [s.get("id") for s in again["steps"] if s.get("id")] == ["checkout", "verify", "remeasure"]
    ids = [s.get("id") for s in merge["steps"] if s.get("id")]
    assert ids.index("checkout") < ids.index("nightly") < ids.index("alert") < ids.index("save")
    assert merge["permissions"] == {"contents": "write"} and "permissions" not in again
    assert {s["with"]["name"] for s in again["steps"] if "upload-artifact" in s.get("uses", "")} == \
        {"site-nvidia", "nightly-nvidia-results"}
    assert jobs_["nightly-nvidia-issues"]["needs"] == "nightly-nvidia-remeasure"

    assert "strategy" not in jobs_["nightly-amd"]  # the other vendor keeps one runner
    assert doc["jobs"]["pages"]["needs"] == ["nightly-nvidia-merge", "nightly-nvidia-remeasure",
                                             "nightly-nvidia-issues", "nightly-amd", "nightly-amd-issues"]


@pytest.mark.parametrize("bad", [0, 65, "two", True])
def test_nightly_shards_is_validated(tmp_path, bad):
    with pytest.raises(ConfigError, match="nvidia.runners.nightly_shards"):
        load_thresholds(_thresholds(tmp_path, {"nvidia": bad}))


def test_gpu_test_job_starts_eight_workers_per_gpu():
    tests = [c for c in jobs.PR_GPU_COMMANDS if c.id == "tests"][0]
    words = tests.words("nvidia")
    assert words[words.index("-n") + 1] == "auto" and "loadgroup" in words
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    assert "def pytest_xdist_auto_num_workers" in conftest  # what `-n auto` asks
    assert conftest.index("pin_xdist_worker()") < conftest.index("torch.cuda.is_available()")
