"""GitHub's REST API through `gh api`, the mechanism the PR comment workflow posts with.

`gh` is the GitHub CLI that GitHub-hosted runners ship; it authenticates with the job's token
in `GH_TOKEN` (docs/workflows.md). The PR comment's scripts call it from bash
(perf/ci/workflows.py); the nightly's issues (perf/nightly/issues.py) call it through this
class, which a test replaces with a fake. Stdlib only: it runs on a bare hosted runner.
"""

from __future__ import annotations

import json
import subprocess

PER_PAGE = 100  # GitHub's largest page


class ApiError(RuntimeError):
    """A call that GitHub (or gh) refused: one line naming the endpoint and gh's message."""


class GhApi:
    """The few calls the nightly's issues need, on repository `repo` (owner/name)."""

    def __init__(self, repo: str, gh: str = "gh"):
        self.repo = repo
        self.gh = gh

    def _call(self, *args: str, payload: dict | None = None) -> str:
        cmd = [self.gh, "api", *args]
        if payload is not None:
            cmd += ["--input", "-"]
        try:
            done = subprocess.run(cmd, input=json.dumps(payload) if payload is not None else None,
                                  capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            raise ApiError(f"{self.gh}: not found; install the GitHub CLI (GitHub-hosted runners have it)") \
                from None
        except subprocess.TimeoutExpired:
            raise ApiError(f"gh api {args[-1]}: no answer in 120 s") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ApiError(f"gh api {' '.join(a for a in args if not a.startswith('-'))}: {last}")
        return done.stdout

    def _pages(self, path: str) -> list:
        """Every item of a paginated list (`gh api --paginate` prints one JSON array per page)."""
        text = self._call("--paginate", path)
        items, decoder, i = [], json.JSONDecoder(), 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                return items
            page, i = decoder.raw_decode(text, i)
            items.extend(page if isinstance(page, list) else [page])

    def open_issues(self) -> list[dict]:
        """Open issues (not pull requests) of the repository."""
        issues = self._pages(f"repos/{self.repo}/issues?state=open&per_page={PER_PAGE}")
        return [i for i in issues if isinstance(i, dict) and "pull_request" not in i]

    def comments(self, number: int) -> list[dict]:
        return self._pages(f"repos/{self.repo}/issues/{int(number)}/comments?per_page={PER_PAGE}")

    def create_issue(self, title: str, body: str) -> dict:
        return json.loads(self._call("--method", "POST", f"repos/{self.repo}/issues",
                                     payload={"title": title, "body": body}))

    def create_comment(self, number: int, body: str) -> dict:
        return json.loads(self._call("--method", "POST", f"repos/{self.repo}/issues/{int(number)}/comments",
                                     payload={"body": body}))
