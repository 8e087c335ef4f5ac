"""Git: the one place the harness asks git anything (commits, bases, worktrees, the data branch).

Both gates compare a head with a base commit, the nightly records HEAD, results record the
commit they measured, `perf bisect` walks a range of commits, and the nightly keeps its
history on a branch of its own (perf/nightly/store.py): a worktree of a remote branch (an
orphan commit where the branch does not exist yet), a commit of some paths, and a push that
fetches and rebases when another runner pushed first. A user's mistake here (no
checkout, unknown ref, dirty tree) is a `ConfigError`: one line naming the ref or the path
and the fix, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

from perf import process
from perf.errors import ConfigError

DEFAULT_BASES = ("origin/main", "main")  # a change is compared with its merge base with these


def git(root: str, *args: str, check: bool = False, timeout: float = 120, input: str | None = None,
        ) -> str | None:
    """`git -C root ARGS` stdout, stripped; None when it fails (ConfigError with `check`)."""
    out = run(root, *args, timeout=timeout, input=input, check=check)
    if out is None or out.returncode != 0:
        if check and out is not None:
            raise ConfigError(f"{root}: `git {' '.join(args)}` failed: "
                              f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return out.stdout.strip()


def run(root: str, *args: str, timeout: float = 120, input: str | None = None, check: bool = False,
        ) -> subprocess.CompletedProcess | None:
    """`git -C root ARGS` as a finished process (exit code, stdout, stderr); None when git could
    not run (ConfigError with `check` when it is not installed)."""
    try:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=timeout,
                              input=input)
    except FileNotFoundError:
        if check:
            raise ConfigError("git: not found on PATH; install git (the gates compare commits)") from None
        return None
    except (OSError, subprocess.SubprocessError):
        return None


def first_change_time(root: str, path: str, text: str) -> str | None:
    """The commit time (ISO 8601) of the oldest commit that added or removed `text` in `path`
    (`git log -S`); "" when no commit did (an uncommitted edit); None when git cannot tell."""
    out = git(root, "log", "--reverse", "--format=%cI", "-S", text, "--", path)
    return None if out is None else (out.splitlines() or [""])[0]


def repo_root(path: str) -> str:
    root = git(path, "rev-parse", "--show-toplevel")
    if root is None:
        raise ConfigError(f"{path}: not a git checkout; the gates compare commits, run them in a clone")
    return root


def head(root: str) -> str | None:
    return git(root, "rev-parse", "HEAD")


def commit_author(root: str, sha: str) -> tuple[str, str] | None:
    """(name, email) of commit `sha`'s author in the checkout at `root`; None when git cannot say."""
    out = git(root, "log", "-1", "--format=%an%x00%ae", sha, "--", timeout=30)
    if not out or "\0" not in out:
        return None
    name, email = out.split("\0", 1)
    return name, email


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


def _identity(author: str) -> tuple[str, ...]:
    return ("-c", f"user.name={author}", "-c", f"user.email={author}@localhost", "-c", "commit.gpgsign=false")


def commit_all(root: str, message: str, author: str = "perf-harness") -> str:
    """Stage every change of the checkout at `root` and commit it under a throwaway identity
    (the commits the gate self-test and the bisect demo make); the new commit's sha."""
    git(root, "add", "-A", check=True)
    git(root, *_identity(author), "commit", "-qm", message, check=True)
    return git(root, "rev-parse", "HEAD", check=True)


def commit_empty(root: str, message: str, author: str = "perf-harness") -> str:
    """An empty commit (no change at all) on the checkout at `root`; its sha."""
    git(root, *_identity(author), "commit", "-q", "--allow-empty", "-m", message, check=True)
    return git(root, "rev-parse", "HEAD", check=True)


def commit_paths(root: str, paths: list[str], message: str, author: str = "perf-harness") -> str | None:
    """Commit what changed under `paths` (relative to the checkout `root`), nothing else; the
    new commit's sha, None when nothing there changed."""
    git(root, "add", "-A", "--", *paths, check=True)
    if run(root, "diff", "--cached", "--quiet", "--", *paths).returncode == 0:
        return None
    git(root, *_identity(author), "commit", "-qm", message, "--", *paths, check=True)
    return git(root, "rev-parse", "HEAD", check=True)


# --- a branch of its own: the nightly's data branch --------------------------------------------


def remote_tip(root: str, remote: str, branch: str) -> str | None:
    """The commit `branch` points to on `remote` (fetched into this repository), None where the
    remote has no such branch; ConfigError when the remote cannot be reached."""
    out = run(root, "ls-remote", "--heads", remote, f"refs/heads/{branch}", timeout=300)
    if out is None or out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["?"])[-1] if out is not None else "git did not run"
        raise ConfigError(f"--remote {remote}: cannot reach it from {root} ({why}); name a remote of this "
                          f"clone (git remote -v) or check the job's token")
    if not out.stdout.strip():
        return None
    git(root, "fetch", "--quiet", "--no-tags", remote, f"refs/heads/{branch}", check=True, timeout=600)
    return git(root, "rev-parse", "FETCH_HEAD^{commit}", check=True)


def orphan_commit(root: str, message: str, author: str = "perf-harness") -> str:
    """A commit with no parent and an empty tree: the first commit of a new branch."""
    empty = git(root, "hash-object", "-t", "tree", "-w", "--stdin", input="", check=True)
    return git(root, *_identity(author), "commit-tree", empty, "-m", message, check=True)


@contextlib.contextmanager
def branch_worktree(root: str, remote: str, branch: str, path: str | None = None,
                    ) -> Iterator[tuple[str, str]]:
    """(folder, base): `branch` of `remote` checked out, detached, in a worktree (a new orphan
    commit where the remote has no such branch). `path`: that folder, kept afterwards (made
    anew, or an earlier worktree there moved to the tip); else a temporary one, removed."""
    base = remote_tip(root, remote, branch) or orphan_commit(root, f"{branch}: the nightly's history")
    if path is None:
        with worktree(root, base, name=branch) as folder:
            yield folder, base
        return
    path = os.path.abspath(path)
    if os.path.isdir(os.path.join(path, ".git")) or os.path.isfile(os.path.join(path, ".git")):
        if _common_dir(path) != _common_dir(root):
            raise ConfigError(f"--data {path}: a checkout of another repository; name a new folder")
        git(path, "checkout", "--quiet", "--force", "--detach", base, check=True)
        git(path, "clean", "-fdxq", check=True)
    elif os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise ConfigError(f"--data {path}: exists and is not a checkout of the data branch; name a new "
                          f"folder")
    else:
        git(root, "worktree", "prune")
        git(root, "worktree", "add", "--quiet", "--detach", path, base, check=True)
    yield path, base


def _common_dir(root: str) -> str:
    """The repository a checkout (or worktree) belongs to: its common .git folder, resolved."""
    return os.path.realpath(os.path.join(root, git(root, "rev-parse", "--git-common-dir", check=True) or ""))


# Pause before the n-th retry of a rejected push: RETRY_S * 2**n seconds plus up to as much
# again at random, so runners that raced once do not race again in step (a default chosen by
# reasoning: GitHub answers a push in about a second).
RETRY_S = 1.0


def push_retrying(root: str, remote: str, branch: str, base: str, retries: int,
                  redo: Callable[[], None], say: Callable[[str], None] = print) -> str:
    """Push HEAD of the worktree `root` (commits on top of `base`) to `branch` of `remote`. When
    the push is refused (another runner pushed first), fetch the branch, rebase this worktree's
    own commits onto it and push again, up to `retries` times; where the rebase conflicts, the
    worktree is moved to the new tip and `redo()` makes its commit again. The commit pushed."""
    for attempt in range(retries + 1):
        out = run(root, "push", "--quiet", remote, f"HEAD:refs/heads/{branch}", timeout=600)
        if out is not None and out.returncode == 0:
            return git(root, "rev-parse", "HEAD", check=True)
        why = _refusal(out)
        if attempt == retries:
            raise ConfigError(f"{remote} {branch}: not pushed after {retries + 1} tries (last: {why}); the "
                              f"remote is as it was: run the same command again (--retries N tries longer)")
        pause = RETRY_S * 2 ** attempt
        say(f"{remote} {branch}: push refused ({why}); fetching and rebasing, try {attempt + 2} of "
            f"{retries + 1} in {pause:.0f} s")
        time.sleep(pause + random.uniform(0, pause))  # noqa: S311 (jitter, not security)
        tip = remote_tip(root, remote, branch)
        if tip is None:  # the branch was deleted meanwhile: push ours as it is
            continue
        if run(root, "rebase", "--quiet", "--onto", tip, base).returncode != 0:
            git(root, "rebase", "--abort")
            git(root, "checkout", "--quiet", "--force", "--detach", tip, check=True)
            redo()
        base = tip
    raise AssertionError("unreachable")


def _refusal(out: subprocess.CompletedProcess | None) -> str:
    """Why git refused a push, in one line: its `! [rejected]` or `error:` line."""
    if out is None:
        return "git did not run"
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("!", "error:", "fatal:")):
            return line
    return lines[-1] if lines else f"exit {out.returncode}"


WORKTREE_PREFIX = "perf-"  # a temporary worktree's folder: <tmp>/perf-<name>-<random>/<name>
OWNER_FILE = "owner.pid"  # beside it: the process that made it (a later run prunes it when that one is gone)


@contextlib.contextmanager
def worktree(root: str, sha: str, name: str = "base") -> Iterator[str]:
    """`sha` checked out in a temporary detached worktree, removed and pruned afterwards: also
    when Ctrl-C or SIGTERM comes, even while `git worktree add` runs (git then leaves the
    worktree registered and locked), with both signals held back until it is gone. Worktrees
    that killed runs left (their owner process gone) are pruned first."""
    prune_stale_worktrees(root)
    parent = tempfile.mkdtemp(prefix=f"{WORKTREE_PREFIX}{name}-")
    path = os.path.join(parent, name)
    with open(os.path.join(parent, OWNER_FILE), "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))
    try:
        git(root, "worktree", "add", "--detach", path, sha, check=True)
        yield path
    finally:
        with process.shielded():
            _remove_worktree(root, parent, path)


def _remove_worktree(root: str, parent: str, path: str) -> None:
    """Remove the worktree `path` (in its folder `parent`) whatever state an interrupt left it
    in: registered and locked ("initializing"), half checked out, or never made."""
    if git(root, "worktree", "remove", "--force", "--force", path) is None:
        git(root, "worktree", "unlock", path)
    shutil.rmtree(parent, ignore_errors=True)
    git(root, "worktree", "prune")


def prune_stale_worktrees(root: str) -> list[str]:
    """Remove the temporary worktrees (`worktree`'s) of runs that were killed before they could
    remove their own: those whose owner process no longer runs, or (made before owners were
    written) whose folder is gone or whose add was cut short (`_stuck`). A worktree being made
    now has a live owner. The paths removed."""
    listing = git(root, "worktree", "list", "--porcelain") or ""
    tmp = os.path.realpath(tempfile.gettempdir())
    removed = []
    for block in listing.split("\n\n"):
        lines = block.splitlines()
        path = lines[0][len("worktree "):] if lines and lines[0].startswith("worktree ") else None
        if path is None:
            continue
        parent = os.path.dirname(path)
        if os.path.dirname(os.path.realpath(parent)) != tmp or \
                not os.path.basename(parent).startswith(WORKTREE_PREFIX):
            continue
        alive = _owner_alive(parent)
        if alive or (alive is None and os.path.isdir(path) and not _stuck(lines, parent)):
            continue
        git(root, "worktree", "unlock", path)
        git(root, "worktree", "remove", "--force", "--force", path)
        shutil.rmtree(parent, ignore_errors=True)
        removed.append(path)
    if removed:
        git(root, "worktree", "prune")
    return removed


# A `git worktree add` holds its worktree locked ("initializing") for the seconds a checkout
# takes; one still locked an hour later was killed (a bound chosen by reasoning, not measured).
STUCK_S = 3600


def _stuck(lines: list[str], parent: str) -> bool:
    """Whether a worktree's `git worktree list --porcelain` lines say it is still locked, its
    folder made more than STUCK_S ago: an add that a kill cut short."""
    try:
        age = time.time() - os.stat(parent).st_mtime
    except OSError:
        return True
    return any(line.startswith("locked") for line in lines) and age > STUCK_S


def _owner_alive(parent: str) -> bool | None:
    """Whether the process that made the temporary worktree in `parent` still runs; None where
    there is no owner file (a folder gone, or made by an older harness)."""
    try:
        with open(os.path.join(parent, OWNER_FILE), encoding="utf-8") as f:
            pid = int(f.read().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
