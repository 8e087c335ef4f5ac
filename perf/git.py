"""Git: the one place the harness asks git anything (commits, bases, worktrees).

Both gates compare a head with a base commit, the nightly records HEAD, results record the
commit they measured, `perf bisect` walks a range of commits. A user's mistake here (no
checkout, unknown ref, dirty tree) is a `ConfigError`: one line naming the ref or the path
and the fix, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

from perf.errors import ConfigError

DEFAULT_BASES = ("origin/main", "main")  # a change is compared with its merge base with these


def git(root: str, *args: str, check: bool = False, timeout: float = 120) -> str | None:
    """`git -C root ARGS` stdout, stripped; None when it fails (ConfigError with `check`)."""
    try:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        if check:
            raise ConfigError("git: not found on PATH; install git (the gates compare commits)") from None
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        if check:
            raise ConfigError(f"{root}: `git {' '.join(args)}` failed: "
                              f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return out.stdout.strip()


def repo_root(path: str) -> str:
    root = git(path, "rev-parse", "--show-toplevel")
    if root is None:
        raise ConfigError(f"{path}: not a git checkout; the gates compare commits, run them in a clone")
    return root


def head(root: str) -> str | None:
    return git(root, "rev-parse", "HEAD")


def commit_info(root: str) -> dict:
    """Commit and dirtiness of the checkout at `root` (None outside git), for results headers."""
    status = git(root, "status", "--porcelain", "--untracked-files=no", timeout=10)
    return {"commit": git(root, "rev-parse", "HEAD", timeout=10),
            "dirty": bool(status) if status is not None else None}


def head_commit(root: str) -> tuple[str, str]:
    """(sha, committer date ISO 8601) of HEAD; ConfigError outside a git checkout."""
    line = git(root, "show", "-s", "--format=%H %cI", "HEAD", timeout=30)
    if not line:
        raise ConfigError(f"{root}: not a git checkout with a commit; run this in a clone of the repository")
    sha, date = line.split(" ", 1)
    return sha, date


def check_clean(root: str) -> None:
    status = git(root, "status", "--porcelain", "--untracked-files=no", check=True)
    if status:
        first = status.splitlines()[0].split(None, 1)[-1]
        raise ConfigError(f"{root}: uncommitted changes to tracked files (first: {first}); commit or stash "
                          f"them, or pass --allow-dirty to measure the working tree as head")


def resolve_commit(root: str, ref: str, option: str = "--base-ref") -> str:
    """The full sha of `ref`; ConfigError naming `option` when it is no commit here."""
    sha = git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if not sha:
        raise ConfigError(f"{option} {ref}: no such commit in {root}; fetch it "
                          f"(git fetch origin {ref}) or name another ref")
    return sha


def is_ancestor(root: str, ancestor: str, descendant: str) -> bool:
    """Whether commit `ancestor` is in the history of `descendant` (a commit is its own)."""
    return git(root, "merge-base", "--is-ancestor", ancestor, descendant) is not None


def first_parent_range(root: str, good: str, bad: str) -> list[tuple[str, str]]:
    """(sha, subject) of the commits after `good` up to `bad`, oldest first, along `bad`'s
    first parents (`git bisect --first-parent`), keeping those that contain `good`: when
    `good` came in through a merge, the merge is the first of them, and the mainline commits
    before it (which lack `good`) are left out."""
    log = git(root, "log", "--first-parent", "--reverse", "--format=%H %s", f"{good}..{bad}", check=True)
    descendants = set((git(root, "rev-list", "--ancestry-path", f"{good}..{bad}", check=True) or "").split())
    rows = [line.split(" ", 1) + [""] for line in (log or "").splitlines() if line.strip()]
    return [(row[0], row[1]) for row in rows if row[0] in descendants]


def resolve_base(root: str, base_ref: str | None) -> tuple[str, str]:
    """(sha, description) of the base: `base_ref`, else HEAD's merge base with origin/main or main."""
    if base_ref:
        return resolve_commit(root, base_ref), base_ref
    for ref in DEFAULT_BASES:
        if git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"):
            sha = git(root, "merge-base", "HEAD", ref)
            if sha:
                return sha, f"merge base with {ref}"
    raise ConfigError(f"{root}: neither {' nor '.join(DEFAULT_BASES)} exists to find the base; "
                      f"pass --base-ref REF (e.g. --base-ref HEAD~1)")


def commit_all(root: str, message: str, author: str = "perf-harness") -> str:
    """Stage every change of the checkout at `root` and commit it under a throwaway identity
    (the commits the gate self-test and the bisect demo make); the new commit's sha."""
    git(root, "add", "-A", check=True)
    git(root, "-c", f"user.name={author}", "-c", f"user.email={author}@localhost", "-c",
        "commit.gpgsign=false", "commit", "-qm", message, check=True)
    return git(root, "rev-parse", "HEAD", check=True)


@contextlib.contextmanager
def worktree(root: str, sha: str, name: str = "base") -> Iterator[str]:
    """`sha` checked out in a temporary detached worktree, removed afterwards (also when an
    interrupt cuts the checkout itself short)."""
    parent = tempfile.mkdtemp(prefix=f"perf-{name}-")
    path = os.path.join(parent, name)
    try:
        git(root, "worktree", "add", "--detach", path, sha, check=True)
        yield path
    finally:
        git(root, "worktree", "remove", "--force", path)
        shutil.rmtree(parent, ignore_errors=True)
        git(root, "worktree", "prune")
