"""What the machine refuses is the user's to fix, never an `internal error`: a reader of stdout that
went away (`| head`) ends the command quietly (exit 141, as coreutils' and git's do), and a full
disk, a read-only file system or a permission is one line naming the path, exit 2
(perf/process.py's boundary, the one place that maps exceptions to exit codes)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perf import process
from perf.errors import EXIT_BAD_INPUT, EXIT_BROKEN_PIPE, EXIT_INTERNAL

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
pytestmark = pytest.mark.slow  # starts processes


def test_a_reader_gone_ends_the_command_quietly(tmp_path):
    """`python -m perf table r.jsonl | head -0`: the pipe's reader is closed before the command
    writes its table."""
    env = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "interpreter": False, "commit": "0" * 40}
    header = {"kind": "header", "schema_version": 1, "suite": "smoke", "metrics": ["eager"], "samples": 3,
              "environment": env}
    record = {"kind": "record", "variant": "static_grid", "scenario": "llama3-8b/decode/batch2-kv64/block16",
              "metric": "eager", "repeat": 0, "samples": [1.0] * 3, "clock": "device", "median": 1.0,
              "p20": 1.0, "p80": 1.0, "config": [], "batch_digest": "x", "commit": "0" * 40}
    (tmp_path / "r.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n")
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "perf", "table", str(tmp_path / "r.jsonl")],
                              stdout=write, stderr=subprocess.PIPE, env=ENV, cwd=ROOT, text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == EXIT_BROKEN_PIPE, proc.stderr
    assert proc.stderr == ""  # nothing: no "internal error", no "Exception ignored"


@given(code=st.sampled_from(sorted(process.ENVIRONMENT_ERRNOS)),
       name=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_what_the_machine_refuses_is_one_line_naming_the_path(code, name):
    said = []

    def fail():
        raise OSError(code, os.strerror(code), f"/out/{name}")

    orig = process._say
    process._say = said.append
    try:
        rc = process.boundary(fail)
    finally:
        process._say = orig
    assert rc == EXIT_BAD_INPUT
    assert len(said) == 1 and said[0].startswith(f"error: /out/{name}: "), said
    assert process.ENVIRONMENT_ERRNOS[code] in said[0]


def test_another_os_error_is_still_a_bug():
    said = []
    orig = process._say
    process._say = said.append
    try:
        rc = process.boundary(lambda: (_ for _ in ()).throw(OSError(errno.EBADF, "Bad file descriptor")))
    finally:
        process._say = orig
    assert rc == EXIT_INTERNAL and said[0].startswith("internal error: OSError")


def test_an_unwritable_github_output_is_one_line(tmp_path):
    env = {**ENV, "GITHUB_OUTPUT": str(tmp_path)}  # a directory: every append fails
    proc = subprocess.run([sys.executable, "-m", "perf", "grid", "--github-output"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert len(lines) == 1 and "$GITHUB_OUTPUT" in lines[0] and str(tmp_path) in lines[0], lines
