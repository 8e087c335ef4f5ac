"""A second Triton for this checkout: `triton==X` from the package index, beside the installed one.

Regressions also come from the compiler (Triton 3.2 -> 3.3 cost vLLM's unified attention
~40 %; Triton 3.3 and 3.8 grew shared memory for unchanged kernels), so both gates can
compare one commit under two Tritons (`--toolchain triton==X`). Two Tritons cannot live in
one process; each side runs in its own processes, and this module makes the environment in
which a process of this checkout imports Triton X:

    pip install --no-deps --target .perf-cache/toolchains/triton-X-<python>-<machine> triton==X

and that folder first on PYTHONPATH (then this checkout, then whatever PYTHONPATH held).
Only Triton is installed there (`--no-deps`): torch and everything else stay the installed
ones. After installing, a fresh process with that environment must report Triton X from that
folder and import this checkout's kernels; the folder is then kept and reused (a stamp
file records what was checked). pip runs as `python -m pip` of this interpreter with the
environment as it is, so pip's own options apply: an offline GPU machine installs from a
folder of wheels with `PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels` (docs/static-gate.md,
"Toolchain A/B"). Asking for the installed version needs no install (an A/A run).

Bad input ends in one line and exit 2 (`ConfigError`): a spec other than `triton==X`, a
version pip cannot find (the line lists the versions it can), a failed pip, a Triton that
does not import. Kernels that do not import under Triton X are a finding, not bad input
(`ToolchainBroken`: the gates fail with exit 1).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata

from perf.checkout import ROOT
from perf.errors import ConfigError
from perf.process import child_env

PACKAGE = "triton"
DEFAULT_CACHE = os.path.join(ROOT, ".perf-cache", "toolchains")
CACHE_ENV = "PERF_TOOLCHAIN_CACHE"  # another folder for the installed toolchains (shared between checkouts)
STAMP = "perf-toolchain.json"  # in a toolchain's folder: written once the folder passed its check
# PEP 440 versions as Triton publishes them: 3.5.1, 3.6.0rc1, 3.7.0.dev20260101, 3.2.0+git...
_VERSION = r"\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?(?:\+[A-Za-z0-9.]+)?"
SPEC = re.compile(rf"^{PACKAGE}==({_VERSION})$")
VERSION = re.compile(rf"^{_VERSION}$")
FIX = "pass --toolchain triton==X.Y.Z, e.g. triton==3.5.1 (`pip index versions triton --pre` lists them)"
PIP_OPTIONS = ("PIP_NO_INDEX", "PIP_FIND_LINKS")  # in the stamp (not PIP_INDEX_URL: it may hold a token)
# What a Triton costs to fetch, said before pip starts: a wheel of about 300 MB (PIP_TIMEOUT_S's
# 290 MB one), and the installed triton 3.6.0 of the CPU environment is 641 MB (du, 2026-11-26).
WHEEL_MB, INSTALLED_MB = 300, 650
PIP_TIMEOUT_S = 1800  # a 290 MB wheel over a slow link; unmeasured default (3.9.0: 12 s here, 2026-11-22)
PROBE_TIMEOUT_S = 300  # importing triton and torch in a fresh process (about 3 s here)
# What the check prints: Triton's version and where it came from, the compiler backends it
# finds (Triton 3.6 finds them through its distribution's entry points) and the kernels' variants.
_PROBE = """\
import json, os, sys
out = {}
try:
    import triton
    out.update(triton=triton.__version__, file=os.path.realpath(triton.__file__))
    import triton.backends
    out["backends"] = sorted(triton.backends.backends)
    import kernels
    out["variants"] = sorted(kernels.VARIANTS)
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:400]
print(json.dumps(out))
"""


class ToolchainBroken(RuntimeError):
    """This checkout's kernels do not import under the toolchain's Triton: a finding (exit 1)."""


def parse(spec: str) -> str:
    """The version X of `triton==X`; ConfigError for anything else."""
    m = SPEC.match((spec or "").strip())
    if m is None:
        raise ConfigError(f"--toolchain {spec!r}: not a pinned Triton; {FIX}")
    return m.group(1)


def installed_version() -> str | None:
    """The Triton of this interpreter (the base side), from its metadata (triton is not imported)."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Triton `version`, imported from `path` first (None: the installed Triton, nothing added)."""

    version: str
    path: str | None = None

    @property
    def spec(self) -> str:
        return f"{PACKAGE}=={self.version}"

    @property
    def installed(self) -> bool:
        return self.path is None

    def pythonpath(self, rest: str | None = None) -> str:
        """PYTHONPATH of a process of this checkout under this Triton: toolchain, checkout, `rest`."""
        return os.pathsep.join(filter(None, [self.path, ROOT, rest]))

    def env(self, base: dict | None = None, **child) -> dict:
        """A child's environment (`perf.process.child_env`: `base`, `drop`, overrides) with this
        toolchain's Triton and then this checkout ahead of its PYTHONPATH."""
        return child_env(self.path, ROOT, base=base, **child)

    def describe(self) -> str:
        return f"Triton {self.version}" + (" (installed)" if self.installed else "")


def installed() -> Toolchain:
    """The base side: this interpreter's own Triton."""
    version = installed_version()
    if version is None:
        raise ConfigError(f"no {PACKAGE} installed in {sys.executable}; install the pinned one "
                          f"(noxfile.py TRITON) before comparing toolchains")
    return Toolchain(version)


def folder_name(version: str) -> str:
    """One folder per version, Python and machine: a wheel is built for both."""
    return f"{PACKAGE}-{version}-{sys.implementation.cache_tag}-{platform.machine()}"


def cache_root() -> str:
    return os.path.abspath(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def probe(toolchain: Toolchain) -> dict:
    """What a fresh process of this checkout sees under `toolchain` (module docstring)."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=toolchain.env(),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {"error": "the check process printed nothing (crashed); run it by hand: "
                         f"PYTHONPATH={toolchain.pythonpath()} {sys.executable} -c 'import triton'"}


def check(toolchain: Toolchain, where: str) -> dict:
    """Triton X from the toolchain's folder, and this checkout's kernels, in a fresh process."""
    seen = probe(toolchain)
    if "triton" not in seen:
        raise ConfigError(f"{where}: `import triton` fails there ({seen.get('error')}); remove the folder "
                          f"and retry, or pick another version ({FIX})")
    inside = toolchain.path is None or seen["file"].startswith(os.path.realpath(toolchain.path) + os.sep)
    if seen["triton"] != toolchain.version or not inside:
        raise ConfigError(f"{where}: a process there imports Triton {seen['triton']} from {seen['file']}, "
                          f"not {toolchain.version} from this folder (shadowed by a .pth or PYTHONPATH "
                          f"entry?); remove the folder and retry")
    if "backends" in seen and not seen["backends"]:
        raise ConfigError(f"{where}: Triton {toolchain.version} there finds no compiler backend (its "
                          f"`triton.backends` entry points are missing from its dist-info); remove the "
                          f"folder and install the wheel again")
    if "error" in seen:
        raise ToolchainBroken(f"this checkout's kernels do not import under Triton {toolchain.version}: "
                              f"{seen['error']}")
    return seen


def _pip_error(version: str, stderr: str, code: int, where: str) -> ConfigError:
    """pip's failure as one line: a version it cannot find lists those it can."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    found = re.search(r"\(from versions: ([^)]*)\)", stderr)
    offline = os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on")
    source = (f"the wheels in PIP_FIND_LINKS={os.environ.get('PIP_FIND_LINKS', '(unset)')}" if offline
              else "the package index pip uses")
    if found is not None or any("No matching distribution" in x for x in lines):
        versions = (found.group(1).strip() if found else "") or "none"
        return ConfigError(f"--toolchain {PACKAGE}=={version}: not in {source} (versions there: {versions}); "
                           f"name one of those, or put its wheel (Python {sys.version_info[0]}."
                           f"{sys.version_info[1]}, {platform.machine()}) in a folder and set "
                           f"PIP_NO_INDEX=1 PIP_FIND_LINKS=FOLDER")
    last = next((x for x in reversed(lines) if x.startswith("ERROR")), lines[-1] if lines else "no output")
    return ConfigError(f"--toolchain {PACKAGE}=={version}: `pip install --target {where}` failed "
                       f"(exit {code}): {last[:300]}; fix pip's access (PIP_INDEX_URL, or PIP_NO_INDEX=1 "
                       f"with PIP_FIND_LINKS=FOLDER of wheels) and retry")


def pip_install(version: str, target: str) -> None:
    """`pip install --no-deps --target TARGET triton==X` with pip's own options from the environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
           "--quiet", "--target", target, f"{PACKAGE}=={version}"]
    from perf.process import run_child

    try:  # in a process group of its own: an interrupt stops pip and what it started
        done = run_child(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"--toolchain {PACKAGE}=={version}: pip did not finish in {PIP_TIMEOUT_S} s; check "
                          f"its access to the index, or install from a folder of wheels (PIP_NO_INDEX=1 "
                          f"PIP_FIND_LINKS=FOLDER)") from None
    if done.returncode != 0:
        if "No module named pip" in done.stderr:
            raise ConfigError(f"{sys.executable} has no pip; install pip into it (python -m ensurepip) to "
                              f"fetch another Triton")
        raise _pip_error(version, done.stderr, done.returncode, target)


def _stamped(path: str, version: str) -> bool:
    try:
        with open(os.path.join(path, STAMP), encoding="utf-8") as f:
            stamp = json.load(f)
    except (OSError, ValueError):
        return False
    return stamp.get("version") == version and os.path.isfile(os.path.join(path, PACKAGE, "__init__.py"))


def ensure(spec: str, root: str | None = None, installer=pip_install, quiet: bool = False) -> Toolchain:
    """The toolchain of `spec`, installed and checked once, then reused (module docstring).

    `installer(version, folder)` fills a folder with the package (tests pass a fake). An
    install is announced on stderr (what, how big, where) even with `quiet`."""
    version = parse(spec)
    if version == installed_version():
        return installed()
    root = root or cache_root()
    path = os.path.join(root, folder_name(version))
    toolchain = Toolchain(version, path)
    if _stamped(path, version):
        return toolchain
    try:
        os.makedirs(root, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".install-{version}-", dir=root)
    except OSError as e:
        raise ConfigError(f"{root}: cannot install Triton {version} there ({e.strerror or e}); set "
                          f"{CACHE_ENV} to a writable folder") from None
    try:
        # said even with `quiet`: a download of this size must never be silent
        print(f"toolchain: installing {PACKAGE}=={version} into {path}: pip fetches a wheel of about "
              f"{WHEEL_MB} MB (about {INSTALLED_MB} MB installed) from the package index (PIP_INDEX_URL, "
              f"PIP_NO_INDEX and PIP_FIND_LINKS apply); later runs reuse it", file=sys.stderr, flush=True)
        start = time.monotonic()
        installer(version, tmp)
        seen = check(Toolchain(version, tmp), path)
        stamp = {"version": version, "python": sys.version.split()[0], "machine": platform.machine(),
                 "installed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 "seconds": round(time.monotonic() - start, 1), "variants": seen["variants"],
                 "offline": {k: os.environ[k] for k in PIP_OPTIONS if os.environ.get(k)}}
        with open(os.path.join(tmp, STAMP), "w", encoding="utf-8") as f:
            json.dump(stamp, f, indent=1)
        if os.path.isdir(path):  # a stale, unstamped folder (an interrupted install) or a concurrent one
            shutil.rmtree(path, ignore_errors=True)
        try:
            os.rename(tmp, path)
        except OSError:  # another process finished the same install first
            if not _stamped(path, version):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return toolchain


# --- what the index offers (the nightly's choice of versions) ---------------------------------

_PRE = {"a": 0, "b": 1, "rc": 2}


def version_key(version: str) -> tuple:
    """Sort key of a PEP 440 version as Triton publishes them: 3.10.0rc1 < 3.10.0 < 3.10.1."""
    m = re.match(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?", version)
    if m is None:
        return ((), 0)
    release = tuple(int(x) for x in m.group(1).split("."))
    release += (0,) * (4 - len(release))
    if m.group(5) is not None and m.group(2) is None:  # X.dev: before every pre-release of X
        return (release, 0, -1, int(m.group(5)), 0)
    pre = (1, _PRE[m.group(2)], int(m.group(3))) if m.group(2) else (2, 0, 0)
    return (release, *pre, int(m.group(4) or 0))


def is_prerelease(version: str) -> bool:
    return re.search(r"(a|b|rc)\d+|\.dev\d+", version) is not None


def index_versions() -> list[str]:
    """Every Triton version pip can install here, pre-releases included (`pip index versions --pre`)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", PACKAGE, "--pre", "--disable-pip-version-check",
           "--no-input"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise ConfigError(f"`pip index versions {PACKAGE}` did not answer ({e}); check the index access or "
                          f"pass the versions (--versions X,Y)") from None
    m = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or m is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"`pip index versions {PACKAGE} --pre` failed: {last[:300]}; check the index "
                          f"access or pass the versions (--versions X,Y)")
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


def newest(versions: list[str]) -> tuple[str | None, str | None]:
    """(newest release, newest pre-release newer than it or None)."""
    releases = sorted((v for v in versions if not is_prerelease(v)), key=version_key)
    release = releases[-1] if releases else None
    pres = sorted((v for v in versions if is_prerelease(v)
                   and (release is None or version_key(v) > version_key(release))), key=version_key)
    return release, (pres[-1] if pres else None)
