"""Which checkout's `kernels` this process measures or compiles, one side or two at once.

The harness always runs from its own checkout (`ROOT`); the kernels under test may come
from another one (a base commit's worktree). Both loaders import `kernels` (and only it)
from a checkout through a directory holding just a `kernels` link, so an older commit's own
`perf` can never shadow this harness.

- `import_kernels(root)`: one checkout's `kernels` as *the* `kernels` of this process
  (`perf run`, the static gate, the nightly).
- `load_side(root, alias)`: a checkout's `kernels` side by side with another one's, for the
  latency A/B in one process. Every module of the package is imported, then moved out of
  `sys.modules` under `alias` (`kernels` -> `<alias>`, `kernels.batch` -> `<alias>.batch`),
  so two checkouts' packages coexist. Code that imports `kernels...` at call time (function-
  level imports, `perf.scenarios`) must see the side being measured: `Side.active()` swaps
  that side's modules in under their real names for the duration of a `with` block (done
  around each side's half of a round, outside timed regions) and restores what was there.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import importlib
import os
import pkgutil
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType

from perf.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the harness's checkout
PACKAGE = "kernels"


def loaded_from() -> str | None:
    """The checkout whose `kernels` is imported in this process, if any."""
    module = sys.modules.get(PACKAGE)
    if module is None or getattr(module, "__file__", None) is None:
        return None
    return os.path.dirname(os.path.dirname(os.path.realpath(module.__file__)))


def _shim(root: str) -> str:
    """A temporary directory holding only a `kernels` link to `root`'s package."""
    shim = tempfile.mkdtemp(prefix="perf-kernels-")
    atexit.register(shutil.rmtree, shim, ignore_errors=True)
    os.symlink(os.path.join(root, PACKAGE), os.path.join(shim, PACKAGE))
    return shim


def _is_ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _pop_package() -> dict[str, ModuleType]:
    """Remove `kernels` and its submodules from sys.modules; returns them."""
    return {name: sys.modules.pop(name) for name in [n for n in sys.modules if _is_ours(n)]}


def require_kernels(root: str, what: str = "checkout") -> str:
    """`root`, if it holds a `kernels` package; else a ConfigError naming `what` (an import
    from it would fall back to this checkout's kernels and measure them under its name)."""
    if not os.path.isfile(os.path.join(root, PACKAGE, "__init__.py")):
        raise ConfigError(f"{what} {root}: no {PACKAGE}/ package there (no {PACKAGE}/__init__.py); name a "
                          f"checkout of this repository")
    return root


def import_kernels(root: str | None = None):
    """Import and return `kernels` from the checkout at `root` (default: this one)."""
    root = os.path.realpath(require_kernels(root) if root else ROOT)
    if loaded_from() not in (None, root):
        _pop_package()
    if root != os.path.realpath(ROOT) and loaded_from() != root:
        sys.path.insert(0, _shim(root))  # spawned processes inherit it
        importlib.invalidate_caches()
    import kernels

    return kernels


def variant_names(root: str | None = None, *, imported: bool = True) -> tuple[str, ...] | None:
    """The names of the checkout's kernels.VARIANTS (default: this one), read from the dict
    literal in its kernels/__init__.py without importing it (torch and Triton take seconds, in
    every command that checks --variants). Where the literal is gone: `import_kernels(root)`'s
    VARIANTS (its import errors raised), or None when not `imported`."""
    source = os.path.join(root or ROOT, PACKAGE, "__init__.py")
    try:
        with open(source, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        tree = None
    for node in tree.body if tree is not None else ():
        target = node.target if isinstance(node, ast.AnnAssign) else \
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if (isinstance(target, ast.Name) and target.id == "VARIANTS" and isinstance(node.value, ast.Dict)
                and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys)):
            return tuple(k.value for k in node.value.keys)
    return tuple(getattr(import_kernels(root), "VARIANTS", {})) if imported else None


@dataclass
class Side:
    """One checkout's `kernels`, loaded beside others (see the module docstring)."""

    alias: str  # e.g. "kernels_base": where its modules live in sys.modules while inactive
    root: str  # the checkout
    modules: dict[str, ModuleType] = field(repr=False)  # real name ("kernels.batch") -> module
    broken: dict[str, str] = field(default_factory=dict)  # submodule -> import error (not fatal)

    @property
    def kernels(self) -> ModuleType:
        return self.modules[PACKAGE]

    @contextlib.contextmanager
    def active(self) -> Iterator[ModuleType]:
        """This side's modules under their real names inside the block (not reentrant across
        sides: activate one side at a time)."""
        saved = _pop_package()
        sys.modules.update(self.modules)
        try:
            yield self.kernels
        finally:
            now = _pop_package()  # keeps submodules first imported inside the block
            self.modules.update(now)
            for name, module in now.items():
                sys.modules[self.alias + name[len(PACKAGE):]] = module
            sys.modules.update(saved)


def load_side(root: str, alias: str) -> Side:
    """Import every module of `root`'s `kernels` and park it under `alias` (module docstring)."""
    if not alias.isidentifier() or alias == PACKAGE:
        raise ValueError(f"alias {alias!r}: must be an identifier other than {PACKAGE!r}")
    root = os.path.realpath(require_kernels(root))
    saved = _pop_package()
    shim = _shim(root)
    sys.path.insert(0, shim)
    importlib.invalidate_caches()
    broken: dict[str, str] = {}
    try:
        package = importlib.import_module(PACKAGE)
        for info in pkgutil.walk_packages(package.__path__, PACKAGE + "."):
            try:
                importlib.import_module(info.name)
            except Exception as e:  # e.g. a module that needs a GPU library: the side may not use it
                broken[info.name] = f"{type(e).__name__}: {e}".splitlines()[0]
    finally:
        sys.path.remove(shim)
        modules = _pop_package()
        sys.modules.update(saved)
    for name, module in modules.items():
        sys.modules[alias + name[len(PACKAGE):]] = module
    return Side(alias, root, modules, broken)
