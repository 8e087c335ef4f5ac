"""A write that fails (a full disk, an I/O error) leaves no part of itself: the Appender cuts its
file back to the last whole line, the atomic writer leaves the old file, and either is one line
naming the path (a ConfigError: exit 2)."""

from __future__ import annotations

import errno
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf import files
from perf.errors import ConfigError

ROWS = st.lists(st.dictionaries(st.text(min_size=1, max_size=8), st.integers() | st.text(max_size=30),
                                max_size=4), min_size=1, max_size=6)


class _DiskFull:
    """os.write that accepts `room` more bytes, then fails with ENOSPC (a part of a write first)."""

    def __init__(self, room: int):
        self.room = room
        self.real = os.write

    def __call__(self, fd: int, data) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(len(data), self.room)
        self.room -= n
        return self.real(fd, bytes(data[:n]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=ROWS, after=ROWS, room=st.integers(min_value=0, max_value=400))
def test_a_full_disk_leaves_only_whole_lines(before, after, room, tmp_path, monkeypatch):
    path = str(tmp_path / f"r-{room}.jsonl")
    with files.Appender(path, fresh=True) as out:
        for row in before:
            out.append(row)
    kept = open(path, "rb").read()
    full = _DiskFull(room)
    monkeypatch.setattr(os, "write", full)
    try:
        with files.Appender(path, fresh=False) as out:
            for row in after:
                out.append(row)
    except ConfigError as e:
        assert path in str(e) and "No space left" in str(e)
    finally:
        monkeypatch.undo()
    data = open(path, "rb").read()
    assert data.startswith(kept) and data.endswith(b"\n")
    lines = data.decode().splitlines()
    assert [json.loads(line) for line in lines] == (before + after)[:len(lines)]


def test_a_full_disk_keeps_the_old_document(tmp_path, monkeypatch):
    path = tmp_path / "doc.json"
    files.write_json(str(path), {"old": 1})

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ConfigError, match="doc.json: cannot write it"):
        files.write_json(str(path), {"new": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]  # no temporary file left


def test_a_github_output_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    from perf.ci.github import github_output

    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path))  # a directory
    with pytest.raises(ConfigError, match=r"\$GITHUB_OUTPUT .*: cannot write it \(is a directory"):
        github_output("k", "v")
    if os.path.exists("/dev/full"):  # every write fails with ENOSPC
        monkeypatch.setenv("GITHUB_OUTPUT", "/dev/full")
        with pytest.raises(ConfigError, match="/dev/full: cannot write it .No space left"):
            github_output("k", "v")
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "out"))
    github_output("a", "1")
    github_output("b", "2")
    assert (tmp_path / "out").read_text() == "a=1\nb=2\n"
