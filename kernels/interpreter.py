"""Triton's interpreter as the kernels run under it (TRITON_INTERPRET=1): its language patched
once a launch, not once a device-function call.

Triton 3.6's interpreter patches triton.language for a launch (`GridExecutor`) and again on
every device-function call inside it (`InterpretedFunction.__call__` -> `_patch_lang`), with the
same interpreter builder: the repeats set the same attributes to equivalent wrappers again,
thousands of times a launch, and scan the language modules each time (`inspect.getmembers`).
Here each function is patched once per launch: the launch's patch is restored when it ends, a
device function's first call in it does what the interpreter does, its repeats are skipped.
Measured on a 2-core CPU (2026-12-02): `perf run --suite smoke --no-resume` 33-39 s before,
18-26 s after (four runs each); the naive kernel's 936 programs of that suite spent 17.5 of
their 43 s in the repeats (cProfile).

Installed by `kernels` on import when the interpreter is active, so every process that runs the
kernels on a CPU has it: the tests, `perf` commands and the workers they start. Where the
interpreter is not the one this knows, nothing is installed and Triton runs as it is.
"""

from __future__ import annotations


def patch_lang_once_per_launch() -> bool:
    """Install the once-a-launch patching; False where nothing was installed (already there, or
    an interpreter without `_patch_lang` and `GridExecutor`)."""
    from triton.runtime import interpreter

    real = getattr(interpreter, "_patch_lang", None)
    if real is None or getattr(real, "once_per_launch", False) or not hasattr(interpreter, "GridExecutor"):
        return False
    launches: list[set] = []  # per running launch: the functions patched in it

    class _LaunchScope:
        def __init__(self, scope):
            self.scope = scope

        def restore(self):
            launches.pop()
            self.scope.restore()

    class _Nothing:
        def restore(self):
            pass

    def patch_lang(fn):
        if not launches:  # a launch starts: GridExecutor restores its scope when it ends
            scope = _LaunchScope(real(fn))
            launches.append({fn})
            return scope
        if fn not in launches[-1]:  # a device function's first call in this launch
            launches[-1].add(fn)
            real(fn)
        return _Nothing()

    patch_lang.once_per_launch = True
    patch_lang.__wrapped__ = real
    interpreter._patch_lang = patch_lang
    return True
