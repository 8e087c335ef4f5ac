"""A code cause's issue names the author of the commit bisect found: the GitHub account from
`gh api repos/OWNER/NAME/commits/SHA` (a fake `gh` on PATH here), else git's name and email
when gh is missing or refuses; the nightly never fails for it. The issues job, which has a token
where the GPU runner has none, puts the account into an issue attribution wrote with git's name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from perf.ci import github
from perf.nightly import attribute, issues

pytestmark = pytest.mark.slow  # starts git and a fake gh
SHA_LEN = 40  # a full commit sha

# A stand-in for the GitHub CLI: logs its arguments; `api ... repos/o/r/commits/SHA` prints the
# account in $FAKE_LOGIN (nothing for ""), exits 1 with $FAKE_FAIL; issues: an empty list, then
# the issue numbered 1 for any POST or PATCH, whose payload (stdin) is logged too.
FAKE_GH = """#!{python}
import json, os, sys
args = sys.argv[1:]
stdin = sys.stdin.read() if "--input" in args else ""
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"args": args, "stdin": stdin}}) + "\\n")
if os.environ.get("FAKE_FAIL"):
    sys.stderr.write("gh: HTTP 401: Bad credentials\\n")
    sys.exit(1)
if "/commits/" in args[-1]:
    print(os.environ.get("FAKE_LOGIN", ""))
elif "--paginate" in args:
    print("[]")
else:
    print(json.dumps({{"number": 1}}))
"""


@pytest.fixture
def repo(tmp_path):
    """A repository with one commit by Jane Doe <jane@example.com>: (its folder, the commit)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    path = tmp_path / "repo"
    path.mkdir()
    run = lambda *a: subprocess.run(["git", "-C", str(path), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    run("init", "-q")
    (path / "f").write_text("x\n")
    run("add", "f")
    run("-c", "user.name=Jane Doe", "-c", "user.email=jane@example.com", "commit", "-qm", "slower")
    return str(path), run("rev-parse", "HEAD")


@pytest.fixture
def fake_gh(tmp_path, monkeypatch):
    """PATH with the fake gh first; returns the file its calls are logged to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable))
    gh.chmod(0o755)
    log = tmp_path / "gh.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_LOGIN", "octocat")
    return log


@pytest.fixture
def no_gh(tmp_path, monkeypatch):
    """PATH holding git alone: no gh, whatever this machine has installed."""
    bin_dir = tmp_path / "git-only"
    bin_dir.mkdir()
    os.symlink(shutil.which("git"), bin_dir / "git")
    monkeypatch.setenv("PATH", str(bin_dir))


def calls(log) -> list[list[str]]:
    """The argument lists gh was called with."""
    return [json.loads(line)["args"] for line in log.read_text().splitlines()] if log.exists() else []


def payloads(log) -> list[dict]:
    """The JSON payloads of gh's POST and PATCH calls."""
    return [json.loads(json.loads(line)["stdin"]) for line in log.read_text().splitlines()
            if json.loads(line)["stdin"]]


def test_the_account_comes_from_gh_api_on_the_commit(repo, fake_gh):
    root, sha = repo
    who = issues.commit_author(sha, root, "owner/name")
    assert who == {"sha": sha, "login": "octocat", "name": "Jane Doe", "email": "jane@example.com"}
    assert issues.mention(who) == "@octocat"
    (call,) = calls(fake_gh)
    assert call[0] == "api" and call[-1] == f"repos/owner/name/commits/{sha}"
    assert ".author.login // empty" in call


@pytest.mark.parametrize("how", ["fails", "no account"])
def test_git_names_the_author_when_gh_fails_or_knows_no_account(repo, fake_gh, monkeypatch, how):
    root, sha = repo
    monkeypatch.setenv(*(("FAKE_FAIL", "1") if how == "fails" else ("FAKE_LOGIN", "")))
    who = issues.commit_author(sha, root, "owner/name")
    assert who == {"sha": sha, "name": "Jane Doe", "email": "jane@example.com"}
    assert issues.mention(who) == "Jane Doe <jane@example.com>"
    assert len(calls(fake_gh)) == 1  # gh was asked


def test_without_gh_git_names_the_author_and_nothing_fails(repo, no_gh, tmp_path):
    root, sha = repo
    assert shutil.which("gh") is None
    assert issues.mention(issues.commit_author(sha, root, "owner/name")) == "Jane Doe <jane@example.com>"
    assert issues.commit_author(sha, str(tmp_path), "owner/name") is None  # no repository, no gh: no mention
    assert issues.commit_author("0" * SHA_LEN, root, None) is None  # a commit git does not know


def _code_record(author: dict | None) -> dict:
    first = "a" * SHA_LEN
    bisect = {"result": "found", "candidates": [first], "runs": 3, "first_bad": first, "good": "g" * SHA_LEN,
              "bad": "b" * SHA_LEN, **({"author": author} if author else {})}
    return {"cause": "code", "why": "the same-process A/B confirmed it", "night": "2026-11-20",
            "keys": ["static_grid|llama3-8b/decode/batch32-kv1024/block16|graph"],
            "ratios": {"static_grid|llama3-8b/decode/batch32-kv1024/block16|graph": 1.08},
            "evidence": {"good": "g" * SHA_LEN, "bad": "b" * SHA_LEN}, "bisect": bisect}


def test_a_code_causes_issue_mentions_the_author():
    sha = "a" * SHA_LEN
    _, body = issues.render_cause(_code_record({"sha": sha, "login": "octocat", "name": "J"}), "r1", "H100")
    assert f"Author of the first bad commit: @octocat <!-- perf-author: {sha} -->" in body
    _, body = issues.render_cause(_code_record({"sha": sha, "name": "Jane Doe", "email": "jane@example.com"}),
                                  "r1", "H100")
    assert "Author of the first bad commit: Jane Doe <jane@example.com>" in body
    _, body = issues.render_cause(_code_record(None), "r1", "H100")
    assert "Author of" not in body and "First bad commit" in body


class _Lab:
    def __init__(self, author=None):
        if author is not None:
            self.author = author

    def commits(self, good, bad):
        return ["c1", "c2", "c3"]

    def bisect_step(self, runner, good, case):
        from perf.latency import bisect as bisect_mod

        return lambda c: bisect_mod.Step(c, bisect_mod.BAD if c >= "c2" else bisect_mod.GOOD)


def test_bisect_records_the_author_of_the_commit_it_found():
    found = attribute.bisect(_Lab(lambda sha: {"sha": sha, "name": "Jane Doe"}), "r1", "c0", "c3",
                             ("v", "s", "m"))
    assert found["first_bad"] == "c2" and found["author"] == {"sha": "c2", "name": "Jane Doe"}
    assert "author" not in attribute.bisect(_Lab(), "r1", "c0", "c3", ("v", "s", "m"))  # a lab that can't say


def test_the_gate_lab_asks_git_without_gh(repo, no_gh, tmp_path):
    root, sha = repo
    lab = attribute.GateLab(root, str(tmp_path / "out"), "thresholds.yaml", github_repo="owner/name")
    assert lab.author(sha) == {"sha": sha, "name": "Jane Doe", "email": "jane@example.com"}


def test_the_issues_job_puts_the_account_into_an_attributed_issue(repo, fake_gh, tmp_path):
    """Attribution on a runner without a token wrote git's name; the issues job posts it through gh,
    which names the account."""
    root, sha = repo
    folder = tmp_path / "attributed"
    record = _code_record({"sha": sha, "name": "Jane Doe", "email": "jane@example.com"})
    record["bisect"]["first_bad"] = sha
    title, body = issues.render_cause(record, "r1", "H100")
    github.tracker(dry_run_dir=str(folder)).upsert("code/nvidia/x", title, body, ("performance",))
    assert "Jane Doe <jane@example.com>" in body
    issues.replay_attributed(str(folder), github.tracker("owner/name"), log=lambda *_: None)
    assert any(c[-1] == f"repos/owner/name/commits/{sha}" for c in calls(fake_gh))
    (posted,) = payloads(fake_gh)  # the issue opened
    assert f"Author of the first bad commit: @octocat <!-- perf-author: {sha} -->" in posted["body"]
    assert "jane@example.com" not in posted["body"] and posted["title"] == title


def test_an_account_already_named_is_not_asked_again(fake_gh):
    body = "x\n" + issues.AUTHOR_LINE.format(who="@someone", sha="a" * SHA_LEN) + "\n"
    assert issues.with_login(body, github.GhApi("owner/name")) == body and not calls(fake_gh)
