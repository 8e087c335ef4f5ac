"""The vendor a command works for: nvidia | amd, checked against the GPU it runs on.

Every command resolves `--vendor` here: an unknown name, or a vendor other than the GPU
this machine has, is a `ConfigError` (one line, exit 2) instead of thresholds of the wrong
vendor applied silently. Without a GPU (Triton's interpreter) the kernels run NVIDIA's
heuristics, so that is the vendor whose thresholds a CPU self-test uses unless told.
"""

from __future__ import annotations

import os

VENDORS = ("nvidia", "amd")
INTERPRETER_VENDOR = "nvidia"  # the interpreter runs NVIDIA's decision trees (kernels' current_vendor)
CPU_SUITES = ("smoke",)  # the only suites sized for Triton's interpreter (seconds, not hours)


def on_gpu() -> bool:
    """A CUDA/HIP device runs the kernels (not Triton's interpreter)."""
    import torch

    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


def detect() -> str | None:
    """nvidia | amd for this machine's GPU, None without one (or under the interpreter)."""
    if not on_gpu():
        return None
    import torch

    return "amd" if getattr(torch.version, "hip", None) else "nvidia"


def gpu_arch(vendor: str) -> tuple[str, int, str]:
    """(architecture, SM/CU count, device name) of this process's GPU, the architecture as the
    compile targets of thresholds.yaml write it: "90" for sm_90 on NVIDIA, "gfx942" on AMD."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if vendor == "amd":
        arch = str(getattr(props, "gcnArchName", "")).split(":")[0]
    else:
        arch = f"{props.major}{props.minor}"
    return arch, props.multi_processor_count, props.name


def check_name(vendor: str, what: str = "--vendor") -> str:
    from perf.errors import ConfigError

    if vendor not in VENDORS:
        raise ConfigError(f"{what} {vendor}: unknown vendor; use one of {', '.join(VENDORS)}")
    return vendor


def resolve(given: str | None, *, cpu_default: str | None = INTERPRETER_VENDOR) -> str | None:
    """`given` (validated) or this machine's vendor; refuses a vendor the GPU here is not.

    Without a GPU: `given`, else `cpu_default` (None where the caller must be told).
    """
    from perf.errors import ConfigError

    if given is not None:
        check_name(given)
    found = detect()
    if found is not None and given is not None and given != found:
        import torch

        raise ConfigError(f"--vendor {given}: this machine's GPU is {found} "
                          f"({torch.cuda.get_device_name()}); drop --vendor or run on an {given} GPU")
    return given or found or cpu_default


def require_gpu(what: str, suite: str | None = None, *, cpu_ok: bool = False,
                allow: str | None = None) -> bool:
    """The one rule of every command that measures: a GPU-sized run never starts on a CPU.

    Returns whether a GPU is here. Without one, a run of a CPU-sized suite (`suite` in
    CPU_SUITES) or one the caller allows (`cpu_ok`: e.g. `--allow-cpu` given) goes on in
    Triton's interpreter; anything else is a ConfigError naming the fix: `--suite smoke`
    where `suite` is given, and `allow` (the flag that would allow it) where there is one.
    perf/cli.py applies it to every measuring command after their names are checked.
    """
    from perf.errors import ConfigError

    if on_gpu():
        return True
    if cpu_ok or (suite is not None and suite in CPU_SUITES):
        return False
    if suite is None:
        raise ConfigError(f"no GPU here: {what} measures on a CUDA or ROCm GPU, which Triton's interpreter "
                          f"cannot stand in for; run it on a GPU machine")
    small = CPU_SUITES[0]
    also = f", or pass {allow} to run it anyway" if allow else ""
    raise ConfigError(f"no GPU here: {what} --suite {suite} is sized for a GPU (Triton's interpreter would "
                      f"take hours); run it on a GPU machine, or use the {small} suite (--suite {small})"
                      f"{also}")


def interpreter_without_gpu() -> None:
    """Run kernels in Triton's interpreter when there is no GPU (to be called before triton
    is first imported: it reads TRITON_INTERPRET once)."""
    import sys

    import torch

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
