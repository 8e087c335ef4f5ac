"""One worker process per GPU: which device a worker gets, through its visible-devices variable.

The CUDA and HIP runtimes read CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES once, when the
process first initialises them, so a worker must have its variable set before torch touches
the GPU. The nightly sets it in each worker's environment (perf/nightly/shard.py); a
pytest-xdist worker sets it in tests/conftest.py, before torch initialises CUDA, from its
worker id (gw0, gw1, ...) and the pool its controller exported in PERF_GPU_POOL before it
started the workers. A runner that confines a job to some GPUs with its own variable
(perf/vendor.py Vendor.visible_devices) is respected: the pool is that list, never the host's
other GPUs. Nothing here imports torch at import time.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from perf import vendor as vendor_mod

POOL_ENV = "PERF_GPU_POOL"  # "<VARIABLE>=<device>,<device>,...", exported by the controller
# xdist workers per CPU under `-n auto`, dealt round-robin over the GPUs. The grid is bound by
# Triton's compiler, not the GPU: NVIDIA H100 80GB HBM3, 16 cores, 2026-11-26: 16 workers ran
# 6,606 tests in ~9.4 min, 85% of worker time inside Triton's compilation, CPU 98% busy, GPU <1%
# (8 workers per GPU left half of those CPUs idle).
WORKERS_PER_CPU = 1


@dataclass(frozen=True)
class Pool:
    """The devices workers are dealt, and the variable that confines a process to one."""

    variable: str  # its vendor's visible_devices: CUDA_VISIBLE_DEVICES | HIP_VISIBLE_DEVICES
    devices: tuple[str, ...]  # the values a worker's variable takes (indices or UUIDs)
    interpreter: bool = False  # no GPU: stand-in devices, each worker sees none (the interpreter)

    def device(self, index: int) -> str:
        return self.devices[index % len(self.devices)]

    def env(self, index: int) -> dict[str, str]:
        """Environment of worker `index`: its one device (worker k gets device k mod N)."""
        return {self.variable: "" if self.interpreter else self.device(index)}

    def encode(self) -> str:
        return f"{self.variable}={','.join(self.devices)}"

    @classmethod
    def decode(cls, text: str) -> Pool | None:
        variable, _, devices = text.partition("=")
        found = tuple(d for d in devices.split(",") if d.strip())
        if variable not in {v.visible_devices for v in vendor_mod.VENDORS.values()} or not found:
            return None
        return cls(variable, found)


def host_pool() -> Pool | None:
    """This process's GPUs as a pool (None without a GPU): the runner's list when its
    variable is set, else 0..N-1. Asks torch, which must not matter for this process's own
    device (a controller or a driver that runs no kernels itself)."""
    found = vendor_mod.detect()
    if found is None:
        return None
    import torch

    count = torch.cuda.device_count()
    variable = vendor_mod.VENDORS[found].visible_devices
    listed = [d.strip() for d in os.environ.get(variable, "").split(",") if d.strip()]
    devices = tuple(listed[:count]) if listed else tuple(str(i) for i in range(count))
    return Pool(variable, devices) if devices else None


def interpreter_pool(count: int) -> Pool:
    """`count` stand-in devices for trying the sharding without a GPU (Triton's interpreter)."""
    variable = vendor_mod.VENDORS[vendor_mod.INTERPRETER_VENDOR].visible_devices
    return Pool(variable, tuple(f"cpu{i}" for i in range(count)), interpreter=True)


def worker_index(worker_id: str | None) -> int | None:
    """gw3 -> 3; None for the controller or a run without xdist."""
    m = re.fullmatch(r"gw(\d+)", worker_id or "")
    return int(m[1]) if m else None


def pin_xdist_worker(environ=os.environ) -> str | None:
    """Confine this xdist worker to one GPU of its controller's pool; the device, or None.

    Call before torch initialises CUDA (tests/conftest.py does, before `import torch`). In the
    controller, or without xdist, nothing is pinned.
    """
    index = worker_index(environ.get("PYTEST_XDIST_WORKER"))
    pool = Pool.decode(environ.get(POOL_ENV, ""))
    if index is None or pool is None:
        return None
    environ.update(pool.env(index))
    return pool.device(index)


def export_pool(environ=os.environ) -> Pool | None:
    """In the xdist controller: publish the GPUs its workers will be dealt (inherited by them)."""
    if worker_index(environ.get("PYTEST_XDIST_WORKER")) is not None:
        return None
    pool = host_pool()
    if pool is not None:
        environ[POOL_ENV] = pool.encode()
    return pool


def xdist_workers(pool: Pool | None, cpus: int | None) -> int | None:
    """`-n auto`: WORKERS_PER_CPU per CPU, dealt over the GPUs (at least one per GPU); None
    without a GPU (xdist's own default, one per CPU)."""
    if pool is None:
        return None
    return max(len(pool.devices), WORKERS_PER_CPU * (cpus or len(pool.devices)))
