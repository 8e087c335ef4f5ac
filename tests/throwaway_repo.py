"""A throwaway git repository holding this checkout's harness and kernels, for the command-line
tests that need commits (the gates and perf bisect compare commits)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(repo, *args) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True,
                   capture_output=True)


def harness_repo(path, commits: int = 1):
    """`path` made a repository of kernels/, perf/ and thresholds.yaml with `commits` commits
    (after the first, each one changes NOTES.md); skips the test where git is missing."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("kernels", "perf"):
        shutil.copytree(os.path.join(ROOT, d), path / d, ignore=ignore)
    shutil.copy(os.path.join(ROOT, "thresholds.yaml"), path / "thresholds.yaml")
    git(path, "init", "-q", "-b", "main")
    # bytecode stays out of `git status`, as this repository's .gitignore keeps it (processes the tests
    # start there write kernels/__pycache__, which perf grid would take for changed inputs)
    (path / ".git" / "info").mkdir(parents=True, exist_ok=True)
    with open(path / ".git" / "info" / "exclude", "a", encoding="utf-8") as f:
        f.write("__pycache__/\n*.pyc\n")
    for i in range(commits):
        if i:
            (path / "NOTES.md").write_text(f"{i}\n")
        git(path, "add", "-A")
        git(path, "commit", "-qm", f"commit {i}")
    return path
