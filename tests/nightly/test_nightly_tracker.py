"""The nightly's issue tracker (perf.ci.github.tracker): one issue per key, updated, never duplicated.

Both implementations run the same operations: the folder one on disk, the GitHub one against an
in-memory stand-in for GitHub's REST API (what `gh api` would send and receive), and a property
test holds them to a model of what a tracker must remember.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.ci import github
from perf.errors import ConfigError


class MemoryApi:
    """GitHub's issues endpoints in memory: what GhTracker calls on GhApi."""

    repo = "org/kernels"

    def __init__(self, issues=()):
        self.issues = {i["number"]: {"state": "open", "labels": [], "comments": [], **i} for i in issues}
        self.calls: list[tuple] = []

    def open_issues(self):
        self.calls.append(("list",))
        return [dict(i) for i in self.issues.values() if i["state"] == "open"]

    def create_issue(self, title, body, labels=None):
        n = max(self.issues, default=0) + 1
        self.issues[n] = {"number": n, "title": title, "body": body, "state": "open",
                          "labels": [{"name": x} for x in labels or []], "comments": []}
        self.calls.append(("create", n))
        return {"number": n, "html_url": f"https://github.com/org/kernels/issues/{n}"}

    def update_issue(self, number, **fields):
        if "labels" in fields:
            fields["labels"] = [{"name": x} for x in fields["labels"]]
        self.issues[number].update(fields)
        self.calls.append(("update", number, tuple(sorted(fields))))
        return {"number": number}

    def create_comment(self, number, body):
        self.issues[number]["comments"].append(body)
        self.calls.append(("comment", number))
        return {}


def _trackers(tmp_path):
    return {"folder": github.tracker(dry_run_dir=str(tmp_path / "issues")),
            "github": github.GhTracker("org/kernels", api=MemoryApi())}


@pytest.mark.parametrize("kind", ["folder", "github"])
def test_upsert_opens_once_then_updates_and_close_ends_it(tmp_path, kind):
    t = _trackers(tmp_path)[kind]
    n = t.upsert("code/nvidia/m/abc", "slower at abc", "first body", labels=("performance",))
    assert t.upsert("code/nvidia/m/abc", "slower at abc (bisected)", "second body") == n
    other = t.upsert("toolchain/nvidia/m/triton-3.7", "triton", "body")
    assert other != n and t.open_keys() == {"code/nvidia/m/abc", "toolchain/nvidia/m/triton-3.7"}
    t.close("code/nvidia/m/abc", "back at its level since 2026-11-30")
    assert t.open_keys() == {"toolchain/nvidia/m/triton-3.7"}
    t.close("code/nvidia/m/abc", "closed twice: nothing happens")
    again = t.upsert("code/nvidia/m/abc", "slower at abc", "the same cause seen after it was closed")
    assert again not in (n, other)  # a closed issue is history: the cause coming back is news


def test_folder_issue_holds_the_key_marker_labels_comments_and_updates(tmp_path):
    t = github.tracker(dry_run_dir=str(tmp_path))
    n = t.upsert("creep/nvidia/m/2026-11-01", "t", "<!-- perf-key: stale -->\nbody", labels=("a",))
    t.upsert("creep/nvidia/m/2026-11-01", "t", "body v2", labels=("b",))
    t.upsert("creep/nvidia/m/2026-11-01", "t", "body v2", labels=("b",))  # unchanged: not an update
    t.close("creep/nvidia/m/2026-11-01", "recovered")
    doc = json.loads((tmp_path / f"{n}.json").read_text())
    assert doc["body"] == "<!-- perf-key: creep/nvidia/m/2026-11-01 -->\nbody v2"
    assert doc["labels"] == ["a", "b"] and doc["updates"] == 1
    assert doc["comments"] == ["recovered"] and doc["state"] == "closed"
    assert github.key_of(doc["body"]) == "creep/nvidia/m/2026-11-01"


def test_github_tracker_finds_issues_by_marker_and_sends_only_changes():
    api = MemoryApi([{"number": 3, "title": "by a person", "body": "no marker"},
                     {"number": 4, "title": "t", "body": github.with_key("k1", "b"),
                      "labels": [{"name": "performance"}]},
                     {"number": 9, "title": "copy", "body": github.with_key("k1", "copied by hand")}])
    t = github.GhTracker("org/kernels", api=api)
    assert t.open_keys() == {"k1"}  # the oldest issue holding a key is its issue
    assert t.upsert("k1", "t", "b", labels=("performance",)) == 4
    assert [c[0] for c in api.calls] == ["list"]  # unchanged: nothing sent
    assert t.upsert("k1", "t2", "b", labels=("nightly",)) == 4
    assert api.calls[-1] == ("update", 4, ("body", "labels", "title"))
    assert [x["name"] for x in api.issues[4]["labels"]] == ["performance", "nightly"]
    t.close("k1", "fixed by def")
    assert api.issues[4]["state"] == "closed" and api.issues[4]["comments"] == ["fixed by def"]
    assert t.url(4) == "https://github.com/org/kernels/issues/4"
    assert [c[0] for c in api.calls].count("list") == 1  # listed once per tracker


@pytest.mark.parametrize("key", ["", "a b", "a--b", "a>b", "<!--", "x\n", None])
def test_a_key_that_could_break_its_marker_is_refused(tmp_path, key):
    with pytest.raises(ValueError, match="issue key"):
        github.tracker(dry_run_dir=str(tmp_path)).upsert(key, "t", "b")


def test_tracker_without_a_repository_ends_in_one_line(monkeypatch):
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    with pytest.raises(ConfigError, match="--repo ''"):
        github.tracker()
    assert isinstance(github.tracker("org/kernels"), github.GhTracker)


OPS = st.lists(st.tuples(st.sampled_from(["upsert", "close"]), st.sampled_from(["k1", "k2", "a/b:c"]),
                         st.sampled_from(["body 1", "body 2"])), max_size=12)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_any_sequence_keeps_one_open_issue_per_key_on_both_trackers(tmp_path_factory, ops):
    """Model: a key is open after an upsert until a close; its number stays while it is open; an
    issue is never created for a key that has an open one; both trackers agree."""
    tmp = tmp_path_factory.mktemp("t")
    for kind, t in _trackers(tmp).items():
        model: dict[str, int] = {}
        created = 0
        for op, key, body in ops:
            if op == "upsert":
                n = t.upsert(key, f"title {key}", body)
                if key in model:
                    assert n == model[key], kind
                else:
                    created += 1
                model[key] = n
            else:
                t.close(key, "done")
                model.pop(key, None)
            assert t.open_keys() == set(model), kind
        numbers = (i["number"] for i in t.issues()) if kind == "folder" else t.api.issues
        assert len(set(numbers)) == created, kind


def test_the_issues_job_replays_what_attribution_kept_in_a_folder(tmp_path):
    """The GPU runner has no token: attribution keeps its issues in <results>/issues/attributed and
    the issues job posts them, upserting the open ones and closing the closed ones by key."""
    from perf.nightly import issues

    kept = github.tracker(dry_run_dir=str(tmp_path / "issues" / issues.ATTRIBUTED_DIR))
    tc = "toolchain/nvidia/triton-3.6.0-3.7.0"
    kept.upsert(tc, "Nightly toolchain", "x1.06 on decodes", ("toolchain",))
    kept.upsert("code/nvidia/abc", "Nightly code", "fixed later")
    kept.close("code/nvidia/abc", "Back at its level since 2026-02-01")
    old = {"number": 5, "title": "Nightly code", "body": github.with_key("code/nvidia/abc", "old")}
    api = MemoryApi([old])
    acts = issues.post(str(tmp_path), github.GhTracker("org/kernels", api=api), log=lambda *_: None)
    assert [(a["action"], a["key"]) for a in acts] == [("opened", tc), ("closed", "code/nvidia/abc")]
    assert api.issues[5]["state"] == "closed"
    assert api.issues[5]["comments"] == ["Back at its level since 2026-02-01"]
    assert api.issues[6]["state"] == "open" and github.key_of(api.issues[6]["body"]).startswith("toolchain/")
    again = issues.post(str(tmp_path), github.GhTracker("org/kernels", api=api), log=lambda *_: None)
    assert [a["action"] for a in again] == ["updated", "closed already"] and len(api.issues) == 2


def test_a_journal_folder_started_empty_still_closes_an_issue_of_an_earlier_night(tmp_path):
    """Each night the GPU job's attribution starts an empty folder; a cause opened on an earlier
    night and closed tonight must still reach GitHub (the plain folder tracker ignores the close)."""
    from perf.nightly import issues

    folder = tmp_path / "issues" / issues.ATTRIBUTED_DIR
    plain = github.tracker(dry_run_dir=str(tmp_path / "plain"))
    plain.close("code/nvidia/abc", "ignored")
    assert plain.issues() == []
    kept = github.tracker(dry_run_dir=str(folder), journal=True)
    kept.close("code/nvidia/abc", "Back at its level since 2026-02-01")
    kept.close("code/nvidia/abc", "twice: recorded once")
    assert [(i["key"], i["state"]) for i in kept.issues()] == [("code/nvidia/abc", "closed")]
    old = {"number": 5, "title": "Nightly code", "body": github.with_key("code/nvidia/abc", "old")}
    api = MemoryApi([old])
    acts = issues.post(str(tmp_path), github.GhTracker("org/kernels", api=api), log=lambda *_: None)
    assert [(a["action"], a["key"]) for a in acts] == [("closed", "code/nvidia/abc")]
    assert api.issues[5]["state"] == "closed"
    assert api.issues[5]["comments"] == ["Back at its level since 2026-02-01"]
