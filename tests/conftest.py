"""Test session setup: pick the device, fall back to Triton's interpreter on CPU, check values.

Without a GPU, TRITON_INTERPRET=1 must be set before triton is imported; this file does
that so `pytest` alone works on a laptop as well as under `nox -s tests`. On CPU only the
`cpu_subset` of the correctness grid runs; the rest is skipped with the reason.

PAGED_ATTENTION_CHECK_VALUES=1 turns the kernels' metadata value checks on for the whole
session (production calls skip them: they cost a host sync), so a test batch with bad
metadata fails with a ValueError instead of reading out of bounds. Tests of the default
path set it back with monkeypatch.

On a GPU machine, `pytest -n auto` runs one xdist worker per CPU (perf.devices.WORKERS_PER_CPU:
the grid is compile-bound), each confined to one GPU (worker gwK gets GPU K mod N) before torch
initialises CUDA, so N GPUs run N times the work (perf/devices.py).

`--grid-plan FILE` (`perf grid --cases`, perf/change/grid_plan.py): the keyed cases of the
correctness grid whose launches are identical on the PR's base and this commit are deselected,
when the plan was made for this GPU and this very checkout (else it is ignored, with the reason,
and everything runs); docs/latency.md, "The correctness grid's share".

A session started in the background of a script (`nox -s tests &`) inherits SIGINT ignored,
and so would every command the interrupt tests start, which then never see their Ctrl-C
(11 failures, 2026-11-27); the session takes Python's default handler back, as a terminal has.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from perf import devices

_sigint_ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
if _sigint_ignored and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.default_int_handler)

PINNED = devices.pin_xdist_worker()  # an xdist worker: its one GPU, before torch touches CUDA

import torch  # noqa: E402

HAS_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not HAS_GPU:
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("triton was imported before TRITON_INTERPRET=1 could be set")
    os.environ["TRITON_INTERPRET"] = "1"
    import kernels  # noqa: F401  (kernels/interpreter.py: what it skips, installed before any test's kernel)

os.environ["PAGED_ATTENTION_CHECK_VALUES"] = "1"  # kernels.inputs.CHECK_VALUES_ENV

DEVICE = "cuda" if HAS_GPU else "cpu"
POOL = devices.export_pool() if HAS_GPU else None  # the controller: the GPUs its workers are dealt
NO_GPU_REASON = "no CUDA/ROCm GPU: Triton's interpreter runs only the cpu_subset of the grid"
CPU_ONLY_REASON = ("what a machine without a GPU does (Triton's interpreter in this process): "
                   "this process runs on a GPU, so the premise does not hold here")


def pytest_report_header(config):
    from kernels import platform

    p = platform.current()
    lines = [f"kernels platform: vendor={p.vendor} arch={p.arch} device={p.device_name}"]
    if POOL is not None and getattr(config.option, "numprocesses", None):
        lines.append(f"xdist workers pinned round-robin to {POOL.encode()} ({len(POOL.devices)} GPUs)")
    return lines


def grid_plan_decision(config) -> tuple[dict, str | None]:
    """(the --grid-plan document, why it must be ignored or None), decided once per run: by the
    controller (or a run without xdist), and handed to every xdist worker in its `workerinput`
    (`pytest_configure_node`), so that all workers collect alike whatever a worker would see on
    its own (a git status racing another worker's, the GPU it is pinned to): xdist schedules by
    the collection, and workers that deselect differently would run the wrong tests."""
    decided = getattr(config, "_grid_plan_decision", None)
    if decided is not None:
        return decided
    from perf.change import grid_plan
    from perf.errors import ConfigError

    path = config.getoption("grid_plan")
    try:
        doc = grid_plan.read_plan(path)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    given = getattr(config, "workerinput", {}).get("grid_plan_ignored")
    why = (given or None) if given is not None else grid_plan.not_applicable(doc, str(config.rootpath))
    config._grid_plan_decision = (doc, why)
    return doc, why


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller, before starting a worker: hand it the grid plan's decision."""
    if node.config.getoption("grid_plan"):
        node.workerinput["grid_plan_ignored"] = grid_plan_decision(node.config)[1] or ""


def pytest_sessionstart(session):
    """The grid plan's one line, once (the controller under xdist, whose workers deselect), also
    under -q."""
    config = session.config
    if not config.getoption("grid_plan") or hasattr(config, "workerinput"):  # an xdist worker
        return
    doc, why = grid_plan_decision(config)
    path = config.getoption("grid_plan")
    line = (f"--grid-plan {path}: ignored, every case runs: {why}" if why else
            f"--grid-plan {path}: {doc['counts']['unchanged']} keyed cases deselected (identical launches on "
            f"base {doc['base'][:12]} and this commit, which the base passed); {doc['counts']['run']} run")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    (reporter.write_line if reporter is not None else print)(line)


def pytest_xdist_auto_num_workers(config):
    """`-n auto` on a GPU machine: one worker per CPU, dealt over the GPUs (perf/devices.py)."""
    return devices.xdist_workers(POOL, os.cpu_count())


def pytest_configure(config):
    """On a GPU, every test's Triton compiles and cache loads are counted and summed up at the
    end (tests/triton_compiles.py): whether a precompiled cache was found shows in the log."""
    if HAS_GPU:
        import triton_compiles

        triton_compiles.install(relocate_cache=not hasattr(config, "workerinput"))  # once, by the controller
        config.pluginmanager.register(triton_compiles, "triton_compiles")


def pytest_addoption(parser):
    parser.addoption("--grid-plan", default=None, metavar="FILE",
                     help="grid-plan.json of `perf grid --cases`: deselect the keyed cases it finds "
                          "unchanged (identical launches on base and head), if made for this GPU and commit")


def _apply_grid_plan(config, items) -> None:
    from perf.change import grid_plan
    from perf.errors import ConfigError

    path = config.getoption("grid_plan")
    doc, why = grid_plan_decision(config)
    if why:  # the header says why
        return
    ids = {item: _plain_nodeid(item) for item in items}
    try:
        unchanged = grid_plan.deselected(doc, path, ids.values())
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    config.hook.pytest_deselected(items=[item for item in items if ids[item] in unchanged])
    items[:] = [item for item in items if ids[item] not in unchanged]


def _plain_nodeid(item) -> str:
    """The node id without the "@<group>" xdist's loadgroup appends to it in a worker (should
    its hook have run first): the id the plan names."""
    groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")})
    suffix = "@" + "_".join(groups)
    return item.nodeid[: -len(suffix)] if groups and item.nodeid.endswith(suffix) else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup suffixes node ids with "@<group>"
def pytest_collection_modifyitems(config, items):
    if config.getoption("grid_plan"):
        _apply_grid_plan(config, items)
    if HAS_GPU:
        skip_cpu = pytest.mark.skip(reason=CPU_ONLY_REASON)
        for item in items:
            if item.get_closest_marker("no_gpu"):
                item.add_marker(skip_cpu)
        return
    skip_full = pytest.mark.skip(reason=NO_GPU_REASON)
    skip_gpu = pytest.mark.skip(reason="needs a CUDA/ROCm GPU (none found)")
    for item in items:  # by mark, not keyword: a keyword may be a folder's name (a checkout in grid/)
        if item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)
        elif item.get_closest_marker("grid") and not item.get_closest_marker("cpu_subset"):
            item.add_marker(skip_full)


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE
