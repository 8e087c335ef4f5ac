"""KernelLaunch: one planned Triton launch, separated from running it.

Every variant's launcher first *plans* its launches (kernel, grid, runtime arguments,
compile-time constants, warps, stages) and only then runs them. The same plan serves
three users: the call itself, the results JSON (which records the configuration a
scenario ran with) and the static gate (which cross-compiles exactly these
specializations for other vendors' targets without a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class KernelLaunch:
    kernel: Any  # triton.JITFunction
    grid: tuple[int, ...]
    args: dict[str, Any]  # runtime arguments by parameter name
    constexprs: dict[str, Any]  # tl.constexpr parameters by name
    num_warps: int = 4
    num_stages: int = 2
    vendor_options: dict[str, Any] = field(default_factory=dict)  # e.g. waves_per_eu on AMD

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__

    def __call__(self) -> None:
        self.kernel[self.grid](
            **self.args, **self.constexprs,
            num_warps=self.num_warps, num_stages=self.num_stages, **self.vendor_options,
        )

    def config(self) -> dict:
        """JSON-friendly description of the configuration (for results and reports)."""
        return {
            "kernel": self.name,
            "grid": list(self.grid),
            "constexprs": {k: _plain(v) for k, v in self.constexprs.items()},
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            **{k: _plain(v) for k, v in self.vendor_options.items()},
        }


def _plain(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
