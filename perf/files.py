"""Every file the harness reads or writes goes through here: strict readers, one locked writer.

Reading: `read_text`, `load_yaml`, `load_json` and `load_jsonl` turn every way a file can be
wrong (missing, a directory, unreadable, not UTF-8, bad syntax, a key given twice) into a
`ConfigError` that names the file, the line where there is one, and the fix. YAML is loaded
strictly: a duplicated key is refused, never "the last one wins", so a second `fail:` or a
second `nvidia:` section cannot weaken a gate unseen. What a file must contain is each file
kind's own reader's business (thresholds and calibration: perf/thresholds.py, suites:
perf/scenarios.py, results: perf/results.py, findings: perf/verdicts.py, nightly history:
perf/nightly/history.py); they read through these functions.

Writing: `write_text` / `write_json` (whole documents) and `Appender` (JSON Lines, one
record at a time) hold an exclusive lock on the output for as long as they write, so two
runs into one file are refused in one line instead of interleaving; documents are written
to a temporary file beside the target and renamed over it (atomic: a reader sees the old
file or the new one, never a fragment); a write that fails (a full disk) is one line naming
the path and leaves no part of itself (an append is cut back to the last whole line).
`check_output` refuses an output path that cannot be written (a directory, under a file,
unwritable) before any work starts, and claims it: the output's lock (a file or a whole
--out folder) is held until the command ends, so a second command into it is refused in one
line; the processes the command starts (perf.process.child_env) write into what it claimed. `guard_measured`
keeps measured data (calibration, history, baselines) from being replaced by data of
another GPU, vendor or the interpreter without `--force`.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from perf import process
from perf.errors import ConfigError


def _why(e: OSError) -> str:
    """An OSError in a few words (no path: the caller names it)."""
    if isinstance(e, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(e, NotADirectoryError):
        return "a part of the path is a file, not a directory"
    if isinstance(e, PermissionError):
        return "permission denied"
    if isinstance(e, FileNotFoundError):
        return "not found"
    return e.strerror or type(e).__name__


# --- reading -------------------------------------------------------------------------------

def read_text(path: str, what: str, fix: str) -> str:
    """The file's text; ConfigError (`path: <what> <why>; <fix>`) if it cannot be read as UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: {what} is not UTF-8 text (byte {e.start}); {fix}") from None
    except OSError as e:
        raise ConfigError(f"{path}: {what} {_why(e)}; {fix}") from None


@functools.cache
def _strict_loader() -> type:
    """yaml.SafeLoader that refuses a mapping key given twice (PyYAML keeps the last silently).
    Made on first use: JSON readers (the PR comment's, on a bare python3) need no PyYAML."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)
    return StrictLoader


def _strict_mapping(loader, node, deep: bool = False) -> dict:
    import yaml

    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                f"while reading the mapping that starts on line {node.start_mark.line + 1}", node.start_mark,
                f"key {key!r} is given twice (first on line {seen[key]}); keep one", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


def parse_yaml(text: str, path: str, fix: str) -> Any:
    """Strictly parsed YAML text (see `load_yaml`)."""
    import yaml

    try:
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: {where}{problem}; {fix}") from None


def load_yaml(path: str, what: str, fix: str) -> Any:
    """A YAML file, loaded strictly (duplicate keys refused); ConfigError naming path and line."""
    return parse_yaml(read_text(path, what, fix), path, fix)


def load_json(path: str, what: str, fix: str, expect: type | tuple[type, ...] = dict) -> Any:
    """A JSON document of type `expect` (or one of several); ConfigError naming the file otherwise."""
    text = read_text(path, what, fix)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: {what} is not JSON (line {e.lineno}: {e.msg}); {fix}") from None
    if not isinstance(doc, expect):
        wanted = " or ".join("object" if t is dict else t.__name__
                             for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise ConfigError(f"{path}: {what} holds a JSON {type(doc).__name__}, expected a JSON {wanted}; "
                          f"{fix}")
    return doc


def load_jsonl(path: str, what: str, fix: str) -> tuple[list[dict], str | None]:
    """The JSON objects of a JSON Lines file, and its last line if an interrupted writer cut
    it short (a partial line without its newline). Any other bad line is a ConfigError."""
    rows, truncated = load_jsonl_numbered(path, what, fix)
    return [obj for _, obj in rows], truncated


def load_jsonl_numbered(path: str, what: str, fix: str) -> tuple[list[tuple[int, dict]], str | None]:
    """`load_jsonl` with each object's line number (1-based), for readers that name the line
    of a bad record."""
    text = read_text(path, what, fix)
    rows, truncated = [], None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1 and rows:  # no newline after it: the writer stopped mid-line
                truncated = line
                break
            raise ConfigError(f"{path}: line {i + 1} is not JSON; {what} must hold one JSON object per "
                              f"line; {fix}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}: line {i + 1} is a JSON {type(obj).__name__}, not an object; {fix}")
        rows.append((i + 1, obj))
    return rows, truncated


# --- writing -------------------------------------------------------------------------------

def check_output(path: str, flag: str = "--out", directory: bool = False, shared: bool = False) -> str:
    """Claim an output before any work: refuse `path` (a file, or with `directory` a folder to
    write into) under a file, a directory where a file is wanted, or in a place this user
    cannot write, then take its lock for as long as this process lives (`claim`), so a second
    command writing into the same file or folder is refused in one line. `shared`: a folder
    many commands write into at once by design (a compile cache, whose entries are each
    written atomically), checked but not claimed. Returns the path."""
    path = os.fspath(path)
    _check_writable(path, flag, directory)
    if not shared:
        claim(path, flag)
    return path


def _check_writable(path: str, flag: str, directory: bool) -> None:
    target = os.path.abspath(path)
    if directory:
        if os.path.exists(target) and not os.path.isdir(target):
            raise ConfigError(f"{flag} {path}: is a file, not a directory; name a directory")
        probe = target
    else:
        if os.path.isdir(target):
            raise ConfigError(f"{flag} {path}: is a directory; name a file inside it")
        probe = os.path.dirname(target)
    while not os.path.exists(probe):  # the nearest existing ancestor decides
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ConfigError(f"{flag} {path}: {probe} is a file, not a directory; choose another path")
    if not _can_create_in(probe):
        raise ConfigError(f"{flag} {path}: {probe} is not writable by this user; choose another path")
    if not directory and os.path.exists(target) and not os.path.isfile(target):
        # outputs are replaced by a rename: a device (/dev/null) or a socket would be replaced too
        raise ConfigError(f"{flag} {path}: is not a regular file (a device, a pipe or a socket); name a file")
    if not directory and os.path.exists(target) and not os.access(target, os.W_OK):
        raise ConfigError(f"{flag} {path}: the file is not writable by this user; choose another path")


def _can_create_in(directory: str) -> bool:
    """Whether a file can be created in `directory`: tried, since os.access says yes to root
    for /proc, /sys and read-only mounts, where every write then fails."""
    if not os.access(directory, os.W_OK | os.X_OK):
        return False
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".perf-check-")
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.remove(tmp)
    return True


def _makedirs(directory: str, path: str) -> None:
    try:
        os.makedirs(directory or ".", exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{path}: cannot create its directory {directory} ({_why(e)}); choose another "
                          f"path") from None


LOCK_DIR = os.path.join(tempfile.gettempdir(), "perf-locks")  # one lock file per output path
BUSY_FIX = "wait for it to end or write to another path"


def lock_path(path: str) -> str:
    """The lock file of an output: named by the output's real path in one folder of this
    machine's temporary directory, so output folders (a published dashboard, a results
    folder) hold no lock files, and renaming a new version over the output keeps its lock."""
    real = os.path.realpath(path)
    digest = hashlib.sha1(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(LOCK_DIR, f"{os.path.basename(real)[:40]}-{digest}.lock")


def _open_lock(lp: str, path: str):
    _makedirs(os.path.dirname(lp), path)
    if os.path.dirname(lp) == LOCK_DIR:  # shared by every user of this machine, like /tmp
        with contextlib.suppress(OSError):
            os.chmod(LOCK_DIR, 0o1777)
    try:
        return open(lp, "a+", encoding="utf-8")  # noqa: SIM115 (the caller closes it)
    except OSError as e:
        raise ConfigError(f"{path}: cannot create its lock file {lp} ({_why(e)}); choose another "
                          f"path") from None


def _take(f, holder: str | None) -> bool:
    """Try once to take the lock of the open lock file `f`; on success write its holder."""
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    f.seek(0)
    f.truncate()
    f.write(holder or f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}")
    f.flush()
    return True


def _ours(holder: str) -> bool:
    """Whether a lock's holder is a process that started this one (`pid N ...`): the same
    command, whose worker or side process writes into the output its parent claimed."""
    found = re.match(r"pid (\d+) ", holder)
    return bool(found) and process.is_ancestor(int(found.group(1)))


# Outputs claimed by this process (check_output): lock file -> its open file, held until the
# process ends or `release_claims`; None where a process that started this one holds it.
_claims: dict[str, Any] = {}



def claim(path: str, flag: str = "--out") -> str:
    """Take the lock of output `path` (a file or a folder) for the rest of this process, or
    refuse in one line naming `flag` and the holder. Claiming twice, or what a parent process
    of this command claimed, is a no-op. Returns the lock file."""
    lp = lock_path(path)
    if lp in _claims:
        return lp
    if process.inside_command():  # a side or worker of the command that claimed its outputs
        _claims[lp] = None
        return lp
    f = _open_lock(lp, path)
    if _take(f, None):
        _claims[lp] = f
        process.holding_outputs(True)  # the processes it starts (process.child_env) are the command's
        return lp
    other = _holder_of(f)
    f.close()
    if not _ours(other):
        raise ConfigError(f"{flag} {path}: being written by {other or 'another process'}; {BUSY_FIX}")
    _claims[lp] = None
    return lp


def held_claims() -> tuple[str, ...]:
    """The lock files of the outputs this process holds (for `release_claims`' `keep`)."""
    return tuple(_claims)


def release_claims(keep: Iterable[str] = ()) -> None:
    """Release the outputs this process claimed, but those whose lock files are in `keep`
    (what was claimed before a command that ran in this process: `perf.cli.run_command`)."""
    for lp in [lp for lp in _claims if lp not in set(keep)]:
        f = _claims.pop(lp)
        if f is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
    process.holding_outputs(any(_claims.values()))


@contextlib.contextmanager
def lock(path: str, timeout: float = 0.0, holder: str | None = None, what: str | None = None,
         fix: str = BUSY_FIX) -> Iterator[str]:
    """Hold the exclusive lock of `path` (an output, or any lock name with `what`); a second
    holder waits up to `timeout` seconds, then gets a ConfigError naming the first (and `fix`).
    An output this process (or the command that started it) claimed is held already."""
    lp = path if what else lock_path(path)
    if not what and lp in _claims:
        yield lp
        return
    f = _open_lock(lp, path)
    deadline = time.monotonic() + timeout
    try:
        while not _take(f, holder):
            if time.monotonic() >= deadline:
                other = _holder_of(f) or "another process"
                if not what and _ours(other):
                    break  # the command's own output, claimed by the process that started this one
                raise ConfigError(f"{path}: {what or 'being written'} by {other}; {fix}") from None
            time.sleep(0.2)
        yield lp
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


def _holder_of(f) -> str:
    """The holder's name in a lock file: the holder writes it just after taking the lock, so
    an empty file is re-read for up to a second before the holder is called anonymous."""
    for _ in range(20):
        f.seek(0)
        other = f.read().strip()
        if other:
            return other
        time.sleep(0.05)
    return ""


def _replace(path: str, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, fsync it, rename it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    _makedirs(directory, path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path):
            with contextlib.suppress(OSError):
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise ConfigError(f"{path}: cannot write it ({_why(e)}); choose another path") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str, data: bytes, timeout: float = 0.0) -> str:
    """Replace `path` with `data` atomically, under its lock. Returns the path."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a directory; cannot write a file there")
    with lock(path, timeout):
        _replace(path, data)
    return path


def write_text(path: str, text: str, timeout: float = 0.0) -> str:
    """Replace `path` with `text` (UTF-8) atomically, under its lock."""
    return write_bytes(path, text.encode("utf-8"), timeout)


def write_json(path: str, obj: Any, timeout: float = 0.0) -> str:
    """Replace `path` with one JSON document atomically, under its lock."""
    return write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n", timeout)


def rewrite(path: str, make: Callable[[], str], timeout: float = 0.0) -> str:
    """Replace `path` with the text `make()` returns, calling it under the lock: what `make`
    checks in the old file (`guard_measured`, a section it keeps) cannot change before the write."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a directory; cannot write a file there")
    with lock(path, timeout):
        _replace(path, make().encode("utf-8"))
    return path


_WRITERS: set[str] = set()  # the lock files of this process's open Appenders
_WRITERS_LOCK = threading.Lock()


class Appender:
    """A JSON Lines output held exclusively while it is open: `append(obj)` writes one line,
    fsynced, so an interrupted run keeps every finished line; a write that fails (a full disk)
    is cut back to the last whole line. `fresh=True` starts the file over (atomically: the old
    file stays whole until the first line is written)."""

    def __init__(self, path: str, fresh: bool, timeout: float = 0.0):
        self.path = os.fspath(path)
        self._fd = None
        check_output(self.path)
        self._lock = lock(self.path, timeout)
        self._lock.__enter__()
        try:
            self._mark = lock_path(self.path)
            with _WRITERS_LOCK:  # the process holds the output's lock: one writer of its threads too
                if self._mark in _WRITERS:
                    raise ConfigError(f"{self.path}: being written by pid {os.getpid()} (another writer of "
                                      f"this process); {BUSY_FIX}")
                _WRITERS.add(self._mark)
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        try:
            if fresh:
                _replace(self.path, b"")
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            self._release()
            raise ConfigError(f"{self.path}: cannot write it ({_why(e)}); choose another path") from None
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        with _WRITERS_LOCK:
            _WRITERS.discard(self._mark)
        self._lock.__exit__(None, None, None)

    def _write(self, data: bytes) -> None:
        _append_whole(self._fd, self.path, data)

    def append(self, obj: dict) -> None:
        self._write((json.dumps(obj, sort_keys=True, default=str) + "\n").encode("utf-8"))

    def truncate_partial_line(self) -> None:
        """Cut a last line an interrupted writer left without its newline."""
        with open(self.path, "rb") as f:
            data = f.read()
        try:
            os.truncate(self.path, data.rfind(b"\n") + 1)
        except OSError as e:
            raise ConfigError(f"{self.path}: cannot cut its partial last line ({_why(e)})") from None

    def end_last_line(self) -> None:
        """End a complete last line that lacks its newline (a writer stopped right after it),
        so the next line starts on a line of its own."""
        with open(self.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
        self._write(b"\n")

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
            self._release()

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _append_whole(fd: int, path: str, data: bytes) -> None:
    """Append `data` to the open file `fd` and fsync it, or cut the file back to where it
    was and raise a ConfigError naming `path`: a failed write (ENOSPC, EIO) leaves no part."""
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        kept = "; what was written before is kept" if size else ""
        raise ConfigError(f"{path}: cannot write it ({_why(e)}){kept}; free space or choose another "
                          f"path") from None


def append_line(path: str, line: str, flag: str) -> None:
    """Append one line to a file another program reads as it grows ($GITHUB_OUTPUT, whose
    contract is an append, not a rename), whole or not at all; one line naming `flag` and the
    path when it cannot be written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write it ({_why(e)})") from None
    try:
        _append_whole(fd, f"{flag} {path}", (line.rstrip("\n") + "\n").encode("utf-8"))
    finally:
        os.close(fd)


# --- measured data -------------------------------------------------------------------------

# Environment fields that make measured data another machine's: replacing one file's data
# with data that differs in any of them needs --force. `machine`: the CPU of CPU-measured data
# (the static gate's compile-time calibration); absent (None) on both sides elsewhere.
IDENTITY = ("vendor", "gpu", "interpreter", "machine")


def guard_measured(path: str, old: dict | None, new: dict, force: bool, flag: str = "--force") -> None:
    """Refuse to replace the measured data in `path` (environment `old`) with data measured
    elsewhere (environment `new`: another vendor, GPU, or Triton's interpreter) unless forced."""
    if old is None or force:
        return
    for key in IDENTITY:
        a, b = old.get(key), new.get(key)
        if key == "interpreter":
            a, b = bool(a), bool(b)
        if a != b:
            what = {"interpreter": "measured in Triton's interpreter"}.get(key, f"{key} {b!r}")
            raise ConfigError(f"{path}: holds data measured with {key} {a!r}; this data was {what}. Refusing "
                              f"to replace it: write elsewhere, or pass {flag} to replace it anyway")
