"""An interrupted gate leaves no worktree behind (perf/git.py `worktree`), and a later run prunes
what a killed one left.

The gate (`perf gate --plan-only`, which checks out its base on a CPU) runs in a throwaway
repository whose NOTES.md passes through a smudge filter that blocks: the test knows, through a
FIFO, that `git worktree add` is inside its checkout (the worktree registered and locked,
"initializing"), sends the signal then, and only then lets the filter go. No sleep, no timer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import tempfile

import pytest
from throwaway_repo import git, harness_repo

from perf import git as perf_git

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads processes from /proc"),
              pytest.mark.slow]  # starts processes


def _worktrees(repo) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "worktree", "list", "--porcelain"], capture_output=True,
                         text=True, check=True).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def _blocking_repo(tmp_path):
    """A harness repository of two commits whose NOTES.md checkout blocks in a smudge filter:
    it writes a line to FIFO `ready`, then waits for FIFO `go` to be opened and closed."""
    repo = harness_repo(tmp_path / "repo", commits=2)
    (repo / ".gitattributes").write_text("NOTES.md filter=block\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "the blocking filter")
    git(repo, "commit", "-q", "--allow-empty", "-m", "head")
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(ready)
    os.mkfifo(go)
    git(repo, "config", "filter.block.smudge", f"sh -c 'echo in > {ready}; cat {go} >/dev/null; cat'")
    return repo, ready, go


def _release(go) -> None:
    """Let a filter still waiting on FIFO `go` go on (none waiting: nothing to do)."""
    try:
        fd = os.open(go, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no reader: the filter was stopped with the gate
            return
        raise
    os.close(fd)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_gate_interrupted_inside_its_checkout_leaves_no_worktree(sig, tmp_path):
    repo, ready, go = _blocking_repo(tmp_path)
    before = _worktrees(repo)
    env = {**os.environ, "PYTHONPATH": str(repo), "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "perf", "gate", "--plan-only", "--base-ref", "HEAD~1",
                             "--suite", "smoke", "--variants", "naive", "--out", str(tmp_path / "ab")],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with open(ready, encoding="utf-8") as f:  # blocks until the filter runs: the add is mid-checkout
            assert f.readline().strip() == "in"
        during = _worktrees(repo)
        assert len(during) == len(before) + 1, during  # registered (and locked) by now
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        _release(go)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err
    assert _worktrees(repo) == before
    assert not os.path.exists(during[-1])


def test_a_run_prunes_the_worktrees_killed_runs_left(tmp_path):
    repo = harness_repo(tmp_path / "repo")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs (reused only after the pid space wraps)
    left = {}
    for owner in ("dead", "alive", "gone"):
        parent = tempfile.mkdtemp(prefix=f"{perf_git.WORKTREE_PREFIX}base-")
        path = os.path.join(parent, "base")
        git(repo, "worktree", "add", "--detach", path, "HEAD")
        git(repo, "worktree", "lock", "--reason", "initializing", path)  # as a killed add leaves it
        pid = {"dead": dead.pid, "alive": os.getpid(), "gone": None}[owner]
        if pid is None:
            subprocess.run(["rm", "-rf", parent], check=True)
        else:
            with open(os.path.join(parent, perf_git.OWNER_FILE), "w", encoding="utf-8") as f:
                f.write(str(pid))
        left[owner] = path
    try:
        removed = perf_git.prune_stale_worktrees(str(repo))
        assert sorted(removed) == sorted([left["dead"], left["gone"]])
        kept = _worktrees(repo)
        assert left["alive"] in kept
        assert left["dead"] not in kept and left["gone"] not in kept
        assert not os.path.exists(os.path.dirname(left["dead"]))
    finally:
        git(repo, "worktree", "unlock", left["alive"])
        git(repo, "worktree", "remove", "--force", left["alive"])
        with contextlib.suppress(OSError):
            os.remove(os.path.join(os.path.dirname(left["alive"]), perf_git.OWNER_FILE))
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(left["alive"]))
