"""Where the kernels run: vendor (nvidia | amd | cpu) and architecture.

`cpu` means Triton's interpreter (TRITON_INTERPRET=1) runs the kernels on CPU tensors;
it is what tier 0 of CI uses. The probes never touch triton's active driver under the
interpreter, so they are safe to call on a machine without a GPU.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

VENDORS = ("nvidia", "amd", "cpu")


def interpreter_active() -> bool:
    """True when Triton runs kernels in its Python interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass(frozen=True)
class Platform:
    vendor: str  # nvidia | amd | cpu
    arch: str  # sm_90, gfx942, ... or "interpreter"
    device_name: str  # what the driver calls the device
    warp_size: int  # 32 on NVIDIA, 64 on CDNA (gfx9xx)
    num_sms: int  # streaming multiprocessors / compute units (0 on cpu)

    @property
    def torch_device(self) -> str:
        return "cpu" if self.vendor == "cpu" else "cuda"


@functools.cache
def current() -> Platform:
    """The platform kernels launched from this process run on."""
    if interpreter_active() or not torch.cuda.is_available():
        return Platform("cpu", "interpreter", "Triton interpreter", 32, 0)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if torch.version.hip is not None:
        arch = props.gcnArchName.split(":")[0]  # "gfx942:sramecc+:xnack-" -> "gfx942"
        return Platform("amd", arch, props.name, 64, props.multi_processor_count)
    return Platform(
        "nvidia", f"sm_{props.major}{props.minor}", props.name, 32, props.multi_processor_count
    )


def is_hip() -> bool:
    """AMD ROCm backend (the probe the Triton tutorials use for vendor branches)."""
    return current().vendor == "amd"
