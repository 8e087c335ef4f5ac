"""GitHub's REST API through `gh api`, and the nightly's issue tracker on top of it.

`gh` is the GitHub CLI that GitHub-hosted runners ship; it authenticates with the job's token
in `GH_TOKEN` (docs/workflows.md). The PR comment's scripts call it from bash
(perf/ci/workflows.py); the nightly's issues go through `tracker()`: one issue per key, the
key hidden in the body (`<!-- perf-key: KEY -->`), so a cause seen again updates its issue and
never opens a second one. `tracker(repo)` posts through `gh api`; `tracker(dry_run_dir=DIR)`
keeps the same issues as JSON files in DIR (tests, the nightly's replay, dry runs).
`github_output` sets a step's outputs ($GITHUB_OUTPUT). Stdlib only (with perf's ground
floor): it runs on a bare hosted runner.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

PER_PAGE = 100  # GitHub's largest page
OUTPUT_ENV = "GITHUB_OUTPUT"  # the file a step's outputs are appended to (GitHub Actions' contract)


def github_output(key: str, value: str) -> None:
    """Append `key=value` to $GITHUB_OUTPUT: an append, not the atomic writer (GitHub reads
    the file the step appended to), whole or not at all; a file that cannot be written (a full
    disk, no permission) is one line naming it, exit 2."""
    from perf import files
    from perf.errors import ConfigError

    out = os.environ.get(OUTPUT_ENV)
    if not out:
        raise ConfigError(f"--github-output: ${OUTPUT_ENV} is not set (only in a GitHub Actions step); "
                          f"drop --github-output")
    files.append_line(out, f"{key}={value}", f"--github-output: ${OUTPUT_ENV}")
REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


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

    def create_issue(self, title: str, body: str, labels: list[str] | None = None) -> dict:
        payload = {"title": title, "body": body, **({"labels": list(labels)} if labels else {})}
        return json.loads(self._call("--method", "POST", f"repos/{self.repo}/issues", payload=payload))

    def create_comment(self, number: int, body: str) -> dict:
        return json.loads(self._call("--method", "POST", f"repos/{self.repo}/issues/{int(number)}/comments",
                                     payload={"body": body}))

    def commit_login(self, sha: str) -> str | None:
        """The GitHub account of commit `sha`'s author (`.author.login`); None when GitHub knows
        no account for its email, or gh is missing or refused (a mention is never worth a failure)."""
        try:
            login = self._call("--jq", ".author.login // empty", f"repos/{self.repo}/commits/{sha}").strip()
        except (ApiError, OSError):
            return None
        return login if re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})", login) else None

    def update_issue(self, number: int, **fields) -> dict:
        """PATCH an issue: any of title, body, state ("open"/"closed"), labels."""
        return json.loads(self._call("--method", "PATCH", f"repos/{self.repo}/issues/{int(number)}",
                                     payload=fields))


# --- the issue tracker: one issue per key, updated, never duplicated ----------------------------

KEY_MARKER = "<!-- perf-key: {key} -->"
_KEY = re.compile(r"[A-Za-z0-9_.:/@+=,-]+")
_KEY_IN_BODY = re.compile(r"<!-- perf-key: (\S+) -->")


def check_key(key: str) -> str:
    """A key is one word of letters, digits and `_.:/@+=,-` without `--` (which would end the
    HTML comment it is hidden in); ValueError otherwise (a key is made by code, not typed)."""
    if not isinstance(key, str) or not _KEY.fullmatch(key) or "--" in key:
        raise ValueError(f"issue key {key!r}: one word of letters, digits and _.:/@+=,- without '--'")
    return key


def key_marker(key: str) -> str:
    return KEY_MARKER.format(key=check_key(key))


def key_of(body: str | None) -> str | None:
    """The key hidden in an issue's body, None when it has none (an issue a person opened)."""
    m = _KEY_IN_BODY.search(body or "")
    return m.group(1) if m else None


def with_key(key: str, body: str) -> str:
    """`body` with its key's marker as the first line (an older marker of the body replaced)."""
    return key_marker(key) + "\n" + _KEY_IN_BODY.sub("", body).lstrip("\n")


class GhTracker:
    """Issues of a GitHub repository through `gh api`: an open issue whose body holds the key's
    marker is the key's issue; the oldest one wins if a person copied a marker into another."""

    def __init__(self, repo: str, gh: str = "gh", api: GhApi | None = None):
        self.api = api or GhApi(repo, gh)
        self._open: dict[str, dict] | None = None

    def _by_key(self) -> dict[str, dict]:
        if self._open is None:
            self._open = {}
            for issue in sorted(self.api.open_issues(), key=lambda i: i.get("number", 0)):
                key = key_of(issue.get("body"))
                if key is not None:
                    self._open.setdefault(key, issue)
        return self._open

    def open_keys(self) -> set[str]:
        return set(self._by_key())

    def upsert(self, key: str, title: str, body: str, labels=()) -> int:
        body = with_key(key, body)
        issue = self._by_key().get(key)
        if issue is None:
            made = self.api.create_issue(title, body, labels=list(labels))
            self._by_key()[key] = {**made, "title": title, "body": body}
            return int(made["number"])
        have = [x.get("name") if isinstance(x, dict) else x for x in issue.get("labels") or []]
        want = list(dict.fromkeys([*have, *labels]))
        if (issue.get("title"), issue.get("body"), have) != (title, body, want):  # else: a job run again
            self.api.update_issue(issue["number"], title=title, body=body, labels=want)
            issue.update(title=title, body=body, labels=want)
        return int(issue["number"])

    def close(self, key: str, comment: str) -> None:
        issue = self._by_key().get(check_key(key))
        if issue is None:
            return  # closed already, or never opened: nothing to do
        if comment:
            self.api.create_comment(issue["number"], comment)
        self.api.update_issue(issue["number"], state="closed")
        del self._by_key()[key]

    def url(self, number: int) -> str:
        server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
        return f"{server}/{self.api.repo}/issues/{int(number)}"


class FolderTracker:
    """The same interface over a folder, one JSON file per issue (`<number>.json`: number, key,
    title, body, labels, state, comments, updates): what tests and the nightly's replay
    (perf/nightly/simulate.py) post to, and what `--dry-run` leaves for a person to read."""

    def __init__(self, folder: str, journal: bool = False):
        # journal: a close of a key not open in the folder is recorded too (a closed issue with no
        # title), so that a folder started empty on a runner without a token can still close an
        # issue opened on an earlier night once it is posted (perf/nightly/issues.py replay_attributed)
        self.folder, self.journal = folder, journal

    def _issues(self) -> list[dict]:
        from perf import files

        if not os.path.isdir(self.folder):
            return []
        out = []
        for name in os.listdir(self.folder):
            if re.fullmatch(r"\d+\.json", name):
                out.append(files.load_json(os.path.join(self.folder, name), "a dry-run issue",
                                           "remove the folder to start over"))
        return sorted(out, key=lambda i: i["number"])

    def _write(self, issue: dict) -> None:
        from perf import files

        files.write_json(os.path.join(self.folder, f"{issue['number']}.json"), issue)

    def _open(self, key: str) -> dict | None:
        return next((i for i in self._issues() if i["state"] == "open" and i["key"] == key), None)

    def issues(self) -> list[dict]:
        """Every issue of the folder, open and closed, by number."""
        return self._issues()

    def open_keys(self) -> set[str]:
        return {i["key"] for i in self._issues() if i["state"] == "open" and i["key"] is not None}

    def upsert(self, key: str, title: str, body: str, labels=()) -> int:
        body = with_key(key, body)
        issue = self._open(key)
        if issue is None:
            number = max((i["number"] for i in self._issues()), default=0) + 1
            issue = {"number": number, "key": key, "title": title, "body": body, "labels": list(labels),
                     "state": "open", "comments": [], "updates": 0}
        elif (issue["title"], issue["body"]) == (title, body):
            return issue["number"]
        else:
            issue.update(title=title, body=body, updates=issue["updates"] + 1,
                         labels=list(dict.fromkeys([*issue["labels"], *labels])))
        self._write(issue)
        return issue["number"]

    def close(self, key: str, comment: str) -> None:
        issue = self._open(check_key(key))
        if issue is None and self.journal and not any(i["key"] == key for i in self._issues()):
            number = max((i["number"] for i in self._issues()), default=0) + 1
            issue = {"number": number, "key": key, "title": "", "body": "", "labels": [], "state": "open",
                     "comments": [], "updates": 0}
        if issue is None:
            return
        if comment:
            issue["comments"].append(comment)
        issue["state"] = "closed"
        self._write(issue)

    def url(self, number: int) -> str:
        return os.path.join(self.folder, f"{int(number)}.json")


Tracker = GhTracker | FolderTracker


def tracker(repo: str | None = None, dry_run_dir: str | None = None, journal: bool = False) -> Tracker:
    """The nightly's issues: a folder of JSON files when `dry_run_dir` is given (tests, the replay,
    a dry run), else repository `repo` (owner/name, default $GITHUB_REPOSITORY) through `gh`."""
    if dry_run_dir is not None:
        return FolderTracker(dry_run_dir, journal)
    repo = repo or os.environ.get("GITHUB_REPOSITORY", "")
    if not REPO.fullmatch(repo):
        from perf.errors import ConfigError

        raise ConfigError(f"--repo {repo!r}: expected OWNER/NAME (default: $GITHUB_REPOSITORY)")
    return GhTracker(repo)
