"""The heartbeat: one issue per silent runner, updated while it stays silent, closed when its
nights return. A fake clock; issues go to the tracker's folder of JSON files."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from perf.ci import github
from perf.errors import ConfigError
from perf.nightly import heartbeat, store
from tests.nightly.test_nightly_store import results_file

pytestmark = pytest.mark.slow  # starts processes


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)


def add_night(tmp_path, data, runner: str, day: str) -> None:
    src = results_file(tmp_path / "src" / runner / day / "r.jsonl", runner, "a" * 40, day)
    store.write_night(str(data), runner, day, src, None, None)


def issues(folder) -> list[dict]:
    return github.tracker(dry_run_dir=str(folder)).issues()


def test_a_silent_runner_gets_one_issue_updated_then_closed_when_it_returns(tmp_path):
    data, folder = tmp_path / "data", tmp_path / "issues"
    add_night(tmp_path, data, "runner-a_h100", "2026-11-20")  # measured 03:00 UTC
    add_night(tmp_path, data, "runner-b_h100", "2026-11-22")
    tracker = github.tracker(dry_run_dir=str(folder))
    said = []
    beats = heartbeat.heartbeat(str(data), tracker, at("2026-11-22T12:00:00"), 36, say=said.append)
    assert [(b.runner, b.silent, round(b.age_hours)) for b in beats] == [("runner-a_h100", True, 57),
                                                                          ("runner-b_h100", False, 9)]
    (issue,) = issues(folder)
    assert issue["key"] == "heartbeat/runner-a_h100" and issue["state"] == "open"
    assert issue["title"] == "Nightly runner runner-a_h100 silent since 2026-11-20"
    assert "57 hours ago" in issue["body"] and "perf-heartbeat" in issue["labels"]
    # six hours later, still silent: the same issue, updated
    heartbeat.heartbeat(str(data), tracker, at("2026-11-22T18:00:00"), 36, say=said.append)
    (issue,) = issues(folder)
    assert issue["updates"] == 1 and "63 hours ago" in issue["body"]
    # its night lands: the issue is closed with a comment
    add_night(tmp_path, data, "runner-a_h100", "2026-11-23")
    heartbeat.heartbeat(str(data), tracker, at("2026-11-23T06:00:00"), 36, say=said.append)
    (issue,) = issues(folder)
    assert issue["state"] == "closed" and "Nights are back" in issue["comments"][0]
    assert any("heard from again" in line for line in said)
    # silent again later: a new issue, the closed one stays closed
    heartbeat.heartbeat(str(data), tracker, at("2026-11-26T06:00:00"), 36, say=said.append)
    assert [(i["number"], i["state"]) for i in issues(folder)] == [(1, "closed"), (2, "open"), (3, "open")]


@pytest.mark.parametrize("hours, silent", [(20.9, True), (21.1, False)])
def test_the_age_limit_is_the_newest_night_s_measurement_time(tmp_path, hours, silent):
    data = tmp_path / "data"
    add_night(tmp_path, data, "r", "2026-11-20")
    add_night(tmp_path, data, "r", "2026-11-21")  # 03:00: the newest
    (beat,) = heartbeat.beats(str(data), at("2026-11-22T00:00:00"), hours)
    assert beat.night.date == "2026-11-21" and beat.silent is silent


def test_an_unreadable_night_is_refused_not_dated_by_its_folder(tmp_path):
    """A night whose results cannot be read says nothing of when it was measured: dated by its
    folder, a corrupt night would look alive (perf/names.py, perf/nightly/heartbeat.py seen_at)."""
    data = tmp_path / "data"
    add_night(tmp_path, data, "r", "2026-11-21")
    (data / "nights" / "r" / "2026-11-21" / "results.jsonl").write_text("not json\n")
    with pytest.raises(ConfigError, match="2026-11-21/results.jsonl: line 1 is not JSON"):
        heartbeat.beats(str(data), at("2026-11-22T00:00:00"), 36)


def test_heartbeat_command_with_a_dry_run_folder(tmp_path, monkeypatch, capsys):
    from perf.cli import main
    from tests.nightly.test_nightly import ROOT

    data, folder = tmp_path / "data", tmp_path / "issues"
    add_night(tmp_path, data, "runner-a_h100", "2026-11-20")
    monkeypatch.setattr(heartbeat, "_now", lambda: at("2026-11-25T00:00:00"))
    args = ["nightly", "heartbeat", "--config", str(ROOT / "asv.conf.json"), "--data", str(data),
            "--dry-run", str(folder), "--out", str(tmp_path / "out")]
    assert main(args) == 0
    assert "1 of 1 runners silent for more than 36 hours" in capsys.readouterr().out
    assert json.loads((folder / "1.json").read_text())["key"] == "heartbeat/runner-a_h100"
    assert main([*args, "--max-age-hours", "0"]) == 2  # a limit that is no limit
    (tmp_path / "empty" / "nights").mkdir(parents=True)
    assert main([*args[:4], "--data", str(tmp_path / "empty"), "--dry-run", str(folder)]) == 2
    assert "no runner has a night" in capsys.readouterr().err


def test_an_expected_runner_that_never_saved_a_night_is_missing(tmp_path):
    data, folder = tmp_path / "data", tmp_path / "issues"
    add_night(tmp_path, data, "runner-a_h100", "2026-11-22")
    tracker = github.tracker(dry_run_dir=str(folder))
    expected = ("runner-a_h100", "runner-c_mi300x")
    beats = heartbeat.heartbeat(str(data), tracker, at("2026-11-22T12:00:00"), 36, say=lambda _: None,
                                expected=expected)
    m = beats[1]
    assert (m.runner, m.silent, m.expected, m.night) == ("runner-c_mi300x", True, True, None)
    assert not beats[0].silent and beats[0].expected
    (issue,) = issues(folder)
    assert issue["key"] == "heartbeat/runner-c_mi300x" and issue["state"] == "open"
    assert issue["title"] == f"Nightly runner runner-c_mi300x has no night on {store.BRANCH}"
    assert "missing" in issue["body"] and "nightly_runners" in issue["body"]
    # not expected: a runner nobody listed and that never saved is unknown, so no issue
    assert [b.runner for b in heartbeat.beats(str(data), at("2026-11-22T12:00:00"))] == ["runner-a_h100"]
    # its first night lands: the issue is closed
    add_night(tmp_path, data, "runner-c_mi300x", "2026-11-23")
    heartbeat.heartbeat(str(data), tracker, at("2026-11-23T06:00:00"), 36, say=lambda _: None,
                        expected=expected)
    (issue,) = issues(folder)
    assert issue["state"] == "closed" and "Nights are back" in issue["comments"][0]


def test_heartbeat_command_reads_the_expected_runners_from_thresholds(tmp_path, monkeypatch, capsys):
    import yaml

    from perf.cli import main
    from tests.nightly.test_nightly import ROOT

    raw = yaml.safe_load((ROOT / "thresholds.yaml").read_text())
    raw["amd"]["runners"]["nightly_runners"] = ["runner-c_mi300x"]
    thresholds = tmp_path / "t.yaml"
    thresholds.write_text(yaml.safe_dump(raw))
    data, folder = tmp_path / "data", tmp_path / "issues"
    (data / "nights").mkdir(parents=True)  # nothing saved yet: the expected runner is all there is
    monkeypatch.setattr(heartbeat, "_now", lambda: at("2026-11-25T00:00:00"))
    args = ["nightly", "heartbeat", "--config", str(ROOT / "asv.conf.json"), "--data", str(data),
            "--dry-run", str(folder), "--out", str(tmp_path / "out")]
    assert main([*args, "--thresholds", str(thresholds)]) == 0
    assert "1 of 1 runners silent" in capsys.readouterr().out
    assert json.loads((folder / "1.json").read_text())["key"] == "heartbeat/runner-c_mi300x"
    raw["amd"]["runners"]["nightly_runners"] = ["runner c"]  # not a folder name: one line, exit 2
    thresholds.write_text(yaml.safe_dump(raw))
    assert main([*args, "--thresholds", str(thresholds)]) == 2
    assert "amd.runners.nightly_runners[0]" in capsys.readouterr().err


def test_a_runner_listed_recently_is_not_missing_before_its_first_night_is_due(tmp_path):
    data, folder = tmp_path / "data", tmp_path / "issues"
    (data / "nights").mkdir(parents=True)
    tracker = github.tracker(dry_run_dir=str(folder))
    listed = {"runner-c_mi300x": at("2026-11-22T00:00:00")}
    for now, missing in (("2026-11-22T06:00:00", False), ("2026-11-23T11:59:00", False),
                         ("2026-11-23T12:01:00", True)):
        (beat,) = heartbeat.heartbeat(str(data), tracker, at(now), 36, say=lambda _: None,
                                      expected=("runner-c_mi300x",), listed=listed)
        assert beat.silent is missing, now
        assert [i["key"] for i in issues(folder)] == (["heartbeat/runner-c_mi300x"] if missing else [])
    assert "listed since 2026-11-22T00:00+00:00" in issues(folder)[0]["body"]


def test_the_listing_time_is_the_commit_that_added_the_runner(tmp_path):
    """git log -S on thresholds.yaml: the oldest commit adding the name; a name only in the working
    tree is listed now; outside a repository git cannot tell and the runner is left out."""
    import os
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_COMMITTER_DATE": "2026-11-20T10:00:00+00:00",
           "GIT_AUTHOR_DATE": "2026-11-20T10:00:00+00:00"}
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "thresholds.yaml").write_text("runners: [runner-a_h100]\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "a"], cwd=repo, check=True, env=env)
    (repo / "thresholds.yaml").write_text("runners: [runner-a_h100, runner-b_h100]\n")
    now = at("2026-11-25T00:00:00")
    names = ("runner-a_h100", "runner-b_h100")
    got = heartbeat.listed_at(str(repo), str(repo / "thresholds.yaml"), names, now)
    assert got == {"runner-a_h100": at("2026-11-20T10:00:00"), "runner-b_h100": now}
    outside = tmp_path / "plain"
    outside.mkdir()
    (outside / "thresholds.yaml").write_text("x")
    assert heartbeat.listed_at(str(outside), str(outside / "thresholds.yaml"), ("runner-a_h100",), now) == {}
