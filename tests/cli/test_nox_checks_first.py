"""`nox -s perf -- --vendor intel` is refused before anything compiles: the session checks both
commands' arguments (`python -m perf --check-only ...`) before it runs either."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from perf import process

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # starts processes


@pytest.mark.skipif(shutil.which("nox") is None, reason="nox is not installed here")
def test_a_bad_vendor_is_refused_before_the_static_gate_compiles():
    env = {k: v for k, v in os.environ.items() if k != process.COMMAND_ENV}
    env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    done = subprocess.run(["nox", "--no-venv", "-f", str(ROOT / "noxfile.py"), "-s", "perf", "--", "--vendor",
                           "intel"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    said = done.stdout + done.stderr
    if "lacks the package" in said:
        pytest.skip("nox's own interpreter lacks the harness's packages")
    assert done.returncode == 2, said
    ran = [line.split("nox > ", 1)[1] for line in said.splitlines()
           if line.startswith("nox > python -m perf")]
    assert ran and all(line.startswith("python -m perf --check-only ") for line in ran), ran  # nothing ran
    errors = [line for line in said.splitlines() if line.startswith("error:")]
    assert errors == ["error: --vendor intel: unknown vendor; use one of nvidia, amd"], said
