"""Which checkout's `kernels` this process measures or compiles.

The harness always runs from its own checkout (`ROOT`); the kernels under test may come
from another one (a base commit's worktree). `import_kernels` is the one loader: it imports
`kernels` (and only it) from a checkout through a directory holding just a `kernels` link,
so an older commit's own `perf` can never shadow this harness.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the harness's checkout


def loaded_from() -> str | None:
    """The checkout whose `kernels` is imported in this process, if any."""
    module = sys.modules.get("kernels")
    if module is None or getattr(module, "__file__", None) is None:
        return None
    return os.path.dirname(os.path.dirname(os.path.realpath(module.__file__)))


def import_kernels(root: str | None = None):
    """Import and return `kernels` from the checkout at `root` (default: this one)."""
    root = os.path.realpath(root or ROOT)
    if loaded_from() not in (None, root):
        for name in [n for n in sys.modules if n == "kernels" or n.startswith("kernels.")]:
            del sys.modules[name]
    if root != os.path.realpath(ROOT) and loaded_from() != root:
        shim = tempfile.mkdtemp(prefix="perf-kernels-")
        atexit.register(shutil.rmtree, shim, ignore_errors=True)
        os.symlink(os.path.join(root, "kernels"), os.path.join(shim, "kernels"))
        sys.path.insert(0, shim)  # spawned workers inherit it
        importlib.invalidate_caches()
    import kernels

    return kernels
