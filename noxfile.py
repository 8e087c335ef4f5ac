"""Nox sessions: `nox -l` is the menu.

Two ways to run every session:
- default: a fresh virtualenv with the CPU build of torch and the pinned triton, for CI
  tier 0 and laptops (Triton's interpreter runs the kernels);
- `nox --no-venv -s ...` (or `--force-venv-backend none`): the interpreter nox runs in,
  with its preinstalled vendor torch (CUDA or ROCm), which a session never replaces. The
  packages of this repository are used from the checkout.
"""

from __future__ import annotations

import os

import nox

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

# Pins for reproducibility of the virtualenv sessions:
TORCH_CPU = "torch==2.13.0"  # CPU build (a local wheel on CI machines); never on GPU runners
TRITON = "triton==3.6.0"  # the version of the GPU images (H100/H200 image: triton 3.6.0)
# The interpreter fails on tensor-valued loop bounds under NumPy 2.4 ("only 0-dimensional
# arrays can be converted to Python scalars"), measured with triton 3.6.0, torch 2.13 CPU.
NUMPY = "numpy<2.4"
RUFF = "ruff==0.17.6"

HERE = os.path.dirname(os.path.abspath(__file__))


def _no_venv(session: nox.Session) -> bool:
    return session.venv_backend == "none"


def install_project(session: nox.Session, *extras: str) -> None:
    """Install torch (CPU), triton and this project, unless running without a virtualenv."""
    if _no_venv(session):
        session.log("no virtualenv: using the preinstalled torch and triton of this interpreter")
        session.env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
        return
    session.install(TORCH_CPU, TRITON, NUMPY)
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit tests and the correctness grid (interpreter subset on CPU, whole grid on a GPU)."""
    install_project(session, "test")
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the kernels, the harness and the tests."""
    if not _no_venv(session):
        session.install(RUFF)
    session.run("ruff", "check", "kernels", "perf", "tests", "noxfile.py", *session.posargs)


@nox.session(default=False)
def perf(session: nox.Session) -> None:
    """Performance gates for this machine (latency A/B on a GPU; static gates on CPU)."""
    install_project(session, "test")
    session.run("python", "-m", "perf", *session.posargs)
