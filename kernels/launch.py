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

from kernels.inputs import check_launchable
from kernels.platform import interpreter_active


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

    # Kernels compiled for this launch's plan (`CompiledLaunches`), shared by every launch
    # made from one plan; None: always through Triton's JIT dispatch.
    compiled: CompiledLaunches | None = None

    def __call__(self) -> None:
        if self.compiled is not None and self.compiled.launch(self):
            return
        out = self.args.get("out_ptr")
        if isinstance(out, torch.Tensor):  # the kernels' common argument: on the call's device
            check_launchable(out)
        kernel = self.kernel[self.grid](
            **self.args, **self.constexprs,
            num_warps=self.num_warps, num_stages=self.num_stages, **self.vendor_options,
        )
        if self.compiled is not None:
            self.compiled.keep(self, kernel)

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


def _hooked(hook: Any) -> bool:
    """Whether a launch hook would do anything: triton 3.6 keeps its hooks in a `HookChain`
    (never None, so its launcher always calls it), which may be empty; a user may also set a
    plain function."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _plain(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


class CompiledLaunches:
    """Triton's compiled kernels for the launches of one plan, launched without the JIT dispatch.

    `kernel[grid](...)` binds and specializes every parameter on every call: on the NVIDIA
    H100 VM (2026-11-23, triton 3.6.0, docs/lab/2026-11-23.md) 62 us of host time for the attention
    kernel's 49 parameters and 30 us for the reduction's 15, against 14 and 12 us for the
    compiled kernel's own launcher given the same arguments. A plan fixes every integer,
    float, dtype and constant its launches pass (they are in its key); what Triton may still
    specialize differently from call to call is a pointer's 16-byte alignment and the device.
    So the first launch goes through the JIT and its compiled kernel is kept under (device,
    alignments); later launches with the same key call that kernel's launcher directly, with
    the arguments in the kernel's parameter order, as the JIT itself does. The plan's own
    arguments are put in that order once, from its template (`template`); a call fills in
    only its tensors.

    Only where that launcher's calling convention is the one written here (triton 3.6 on
    CUDA); elsewhere every launch takes the JIT path. Launch hooks (profilers) are called
    as the JIT calls them; with none set, the launcher gets None for them and for the launch
    metadata, which the JIT builds and hands to empty hook chains on every launch.
    """

    def __init__(self, template: KernelLaunch, call_tensors: list[str]):
        self._kernels: dict[tuple, Any] = {}
        # the arguments that change from call to call (the plan's other tensors are its own)
        self._call_tensors = call_tensors
        values = {**template.args, **template.constexprs}
        names = template.kernel.arg_names
        # a parameter left to its default needs the JIT's binding: never the fast path
        self._complete = values.keys() >= set(names)
        self._ordered = [values.get(name) for name in names]
        self._slots = [(i, name) for i, name in enumerate(names) if name in call_tensors]
        from triton import knobs
        from triton.runtime import driver

        # looked up once, not by an import statement per launch (each about 0.5 us)
        self._driver, self._runtime = driver, knobs.runtime

    @staticmethod
    def available() -> bool:
        import triton

        return (triton.__version__.startswith("3.6.") and torch.version.hip is None
                and torch.cuda.is_available() and not interpreter_active())

    def _key(self, launch: KernelLaunch) -> tuple[int, int]:
        """(device, the call tensors that are not 16-byte aligned, as a bit mask)."""
        args, misaligned = launch.args, 0
        for bit, name in enumerate(self._call_tensors):
            if args[name].data_ptr() & 15:
                misaligned |= 1 << bit
        return self._driver.active.get_current_device(), misaligned

    def launch(self, launch: KernelLaunch) -> bool:
        """Launch through the kept compiled kernel if there is one for this call's key."""
        key = self._key(launch)
        kernel = self._kernels.get(key)
        if kernel is None:
            return False
        args = self._ordered.copy()
        for i, name in self._slots:
            args[i] = launch.args[name]
        grid = (*launch.grid, 1, 1)
        stream = self._driver.active.get_current_stream(key[0])
        enter, leave = self._runtime.launch_enter_hook, self._runtime.launch_exit_hook
        if _hooked(enter) or _hooked(leave):  # launch hooks (profilers) get what the JIT gives them
            metadata = kernel.launch_metadata(launch.grid, stream, *args)
        else:  # the JIT builds it and calls the empty hook chains even then (H100, 2026-11-23:
            # 0.6-1.9 us per launch, docs/lab/2026-11-23.md "Host cost beside vLLM")
            metadata = enter = leave = None
        kernel.run(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata, metadata,
                   enter, leave, *args)
        return True

    def keep(self, launch: KernelLaunch, kernel) -> None:
        """Keep what the JIT returned for this call's key (a compiled kernel, on a GPU)."""
        if self._complete and hasattr(kernel, "run") and hasattr(kernel, "packed_metadata"):
            self._kernels[self._key(launch)] = kernel
