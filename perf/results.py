"""Results: versioned JSON Lines, appended one record at a time so nothing finished is lost.

A results file starts with a header line (schema version, environment: vendor, GPU, arch,
the GPU's fingerprint (perf/fingerprint.py: UUID, VBIOS, driver, runtime, clocks as the
process starts, Triton's commit, image digest), torch/triton versions, commit, time) followed by one line per
measurement: (variant, scenario, metric, repeat) with every sample, the median, p20/p80,
the kernel configuration the plan chose (`KernelLaunch.config()` of each launch) and the
batch digest. Scenarios a variant cannot run are recorded as `skip` lines with the reason,
failures as `error` lines: nothing is dropped silently. Each line is flushed and fsynced,
so an interrupted run keeps what finished, and a rerun with the same file resumes.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import os
import platform as _pyplatform
import socket
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from perf import files, git, names, schema
from perf.errors import ConfigError, ContextLost, context_lost

SCHEMA_VERSION = 1
METRICS = ("eager", "graph")  # latency per call (ms): launched eagerly; replayed from a CUDA/HIP graph
# Static records of a variant's cold compile time on one compile target (perf/static/report.py
# write_results; `python -m perf compile --emit-json SIDE --results PATH --no-cache`): variant,
# scenario "*", metric "compile_time/<target>", median = CPU seconds summed over the variant's
# specializations on that target, clock "cpu". The nightly's history plots it per variant/target.
COMPILE_TIME = "compile_time"


def compile_time_metric(target: str) -> str:
    return f"{COMPILE_TIME}/{target}"


def environment(root: str | None = None, device_index: int | None = None) -> dict:
    """Where and with what a measurement ran: the fingerprint of this process's GPU
    (perf/fingerprint.py: model, UUID, VBIOS, driver, runtime, Triton's commit, image digest,
    runner, clocks and throttle reasons as it starts), flat, beside the host, the interpreter
    and the kernels' view of the platform; what cannot be read is None (fingerprint `why`).
    Files written before fingerprints carry nvidia-smi's text fields or amd-smi's text under
    `clocks`; the reader takes both (perf.fingerprint.from_environment)."""
    import torch
    import triton

    from perf import fingerprint

    env: dict = {
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "python": _pyplatform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "interpreter": os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    }
    from kernels import platform as kplatform

    p = kplatform.current()
    env.update(vendor=p.vendor, gpu=p.device_name, arch=p.arch, num_sms=p.num_sms)
    fp = fingerprint.collect(device_index)
    env.update({k: fp[k] for k in fingerprint.FIELDS if k not in ("vendor", "torch", "triton")})
    env["limits"], why = fingerprint.limits(fp, device_index)  # perf/roofline.py: None without a GPU
    env["fingerprint_why"] = {**fp["why"], "limits": why} if why else fp["why"]
    if root is not None:
        env.update(git.commit_info(root))
        env["kernels_tree"] = kernels_tree(root)
    return env


def kernels_tree(root: str) -> str | None:
    """A digest of the checkout's kernels/ as it is on disk (every file but caches): what a
    commit alone does not say when the tree is dirty. None without a kernels/ folder."""
    top = os.path.join(root, "kernels")
    if not os.path.isdir(top):
        return None
    h = hashlib.sha256()
    for folder, dirs, entries in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(entries):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(folder, name)
            h.update(os.path.relpath(path, top).encode() + b"\0")
            try:
                with open(path, "rb") as f:
                    h.update(f.read())
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
    return h.hexdigest()[:16]


# Header fields two results files must share to be compared or resumed into one another:
# what was measured and how (the machine is checked separately, field by field).
SETTINGS = ("suite", "metrics", "samples")


@dataclass
class Results:
    """A parsed results file: its header and records (measurements, skips, errors)."""

    path: str
    header: dict
    records: list[dict] = field(default_factory=list)
    truncated: str | None = None  # the last line, cut short by an interrupted run (not a record)

    @property
    def environment(self) -> dict:
        return self.header.get("environment", {})

    @property
    def kind(self) -> str:
        """"latency" (perf run / gate / nightly) or "static" (the static gate's records)."""
        return self.header.get("gate") or self.environment.get("gate") or "latency"

    @property
    def suite(self) -> str | None:
        return self.header.get("suite") or self.environment.get("suite")

    def measurements(self) -> list[dict]:
        return [r for r in self.records if r["kind"] == "record"]

    def skips(self) -> list[dict]:
        return [r for r in self.records if r["kind"] in ("skip", "error", "missing")]

    def done(self) -> set[tuple]:
        """Keys (variant, scenario, metric, repeat) already measured, for resuming."""
        return {(r["variant"], r["scenario"], r["metric"], r["repeat"]) for r in self.measurements()}

    def medians(self) -> dict[tuple[str, str, str], list[float]]:
        """(variant, scenario, metric) -> the median of each repeat, in repeat order."""
        out: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
        for r in self.measurements():
            out.setdefault((r["variant"], r["scenario"], r["metric"]), []).append((r["repeat"], r["median"]))
        return {k: [m for _, m in sorted(v)] for k, v in out.items()}


class ResultsWriter:
    """Append-only JSON Lines writer (perf.files.Appender: the file is locked while it is
    open, so a second writer is refused in one line naming the first). Reopening an existing
    file resumes it, if it was written on this machine, at this commit and kernel tree, with
    these settings; `resume=False` starts it over (another machine's data only with `force`).
    Every line carries the commit (and the kernel tree's digest when it was dirty)."""

    def __init__(self, path: str, header: dict, resume: bool = True, force: bool = False):
        self.path = files.check_output(path)
        env = header.get("environment") or {}
        self._stamp = {"commit": env.get("commit")}
        if env.get("dirty") or env.get("commit") is None:
            self._stamp["kernels_tree"] = env.get("kernels_tree")
        self._records = 0
        exists = os.path.isfile(path) and os.path.getsize(path) > 0
        timed = "static" not in (header.get("gate"), env.get("gate"))  # compile metrics: any machine's alike
        if exists and not resume and timed:
            files.guard_measured(path, _environment_or_none(path), env, force)
        self._out = files.Appender(path, fresh=not (exists and resume))
        self.existing = None
        try:
            if exists and resume:
                self.existing = load(path, warn=False)  # under the lock: nobody appends meanwhile
                _check_same_commit(self.existing.environment, env, path)
                _check_same_machine(self.existing.environment, env, path)
                _check_same_settings(self.existing.header, header, path, "resume into it")
                if self.existing.truncated is not None:
                    self._out.truncate_partial_line()
                    print(f"{path}: its last record was cut short by an interrupted run; dropped it, "
                          f"resuming after {len(self.existing.records)} records", flush=True)
                else:
                    self._out.end_last_line()
            else:
                self._out.append({"kind": "header", "schema_version": SCHEMA_VERSION, **header})
        except BaseException:
            self._out.close()
            raise

    def done(self) -> set[tuple]:
        return self.existing.done() if self.existing else set()

    def count(self) -> int:
        """Measurements in the file: those resumed and those written since."""
        return (len(self.existing.measurements()) if self.existing else 0) + self._records

    def _write(self, obj: dict) -> None:
        self._out.append({**obj, **self._stamp})

    def record(self, *, variant: str, scenario: str, metric: str, repeat: int, samples,
               config: list[dict], digest: str, **extra) -> None:
        self._write({"kind": "record", "variant": variant, "scenario": scenario, "metric": metric,
                     "repeat": repeat, "samples": list(samples.values), "clock": samples.clock,
                     **samples.summary(), "config": config, "batch_digest": digest, **extra})
        self._records += 1

    def skip(self, *, variant: str, scenario: str, reason: str, kind: str = "skip") -> None:
        seen = {(r["kind"], r["variant"], r["scenario"], r["reason"])
                for r in (self.existing.skips() if self.existing else [])}
        if (kind, variant, scenario, reason) not in seen:  # a resumed run does not repeat it
            self._write({"kind": kind, "variant": variant, "scenario": scenario, "reason": reason})
        if kind == "error" and context_lost(reason):  # every later case would fail the same way
            raise ContextLost(f"{variant} on {scenario} faulted the GPU ({reason}); nothing after it can "
                              f"run in this process. What finished is kept in {self.path}: fix the kernel, "
                              f"or rerun into the same file leaving the scenario out (--scenarios)")

    def close(self) -> None:
        self._out.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _environment_or_none(path: str) -> dict | None:
    """The environment of the results file at `path`, None when it is not one (nothing measured
    to keep: a file that is not results may be replaced)."""
    try:
        return load(path, warn=False).environment
    except ConfigError:
        return None


def _identity(env: dict) -> dict:
    """What makes measured data another machine's (perf.files.IDENTITY; the interpreter as a bool)."""
    return {k: bool(env.get(k)) if k == "interpreter" else env.get(k) for k in files.IDENTITY}


def _check_same_machine(old: dict, new: dict, path: str) -> None:
    a, b = _identity(old), _identity(new)
    for key in files.IDENTITY:
        if a[key] != b[key]:
            raise ConfigError(f"{path}: environment.{key} is {a[key]!r}, this machine has {b[key]!r}; "
                              f"resume on the same GPU (or both in Triton's interpreter) or write to a new "
                              f"--out file")


def _check_same_commit(old: dict, new: dict, path: str) -> None:
    """No resume across commits or kernel trees: the records would mix two codes under one header."""
    a, b = old.get("commit"), new.get("commit")
    if a != b:
        raise ConfigError(f"{path}: written at commit {str(a)[:10]}, this checkout is {str(b)[:10]}; write "
                          f"to a new --out or pass --no-resume")
    ta, tb = old.get("kernels_tree"), new.get("kernels_tree")
    if ta is not None and tb is not None and ta != tb:
        raise ConfigError(f"{path}: written at commit {str(a)[:10]} with kernels/ as digest {ta}, this "
                          f"checkout's kernels/ is {tb} (uncommitted changes differ); write to a new --out "
                          f"or pass --no-resume")


def _check_same_settings(old: dict, new: dict, path: str, action: str) -> None:
    for key in SETTINGS:
        if key in old and key in new and old[key] != new[key]:
            raise ConfigError(f"{path}: {key} is {old[key]!r}, this run's is {new[key]!r}; cannot {action} "
                              f"(write to a new --out file, or pass the same settings)")


# --- reading: the one reader of results files --------------------------------------------------

_FIX = "pass a results file written by `python -m perf run` (or a gate's base.jsonl/head.jsonl)"


_is_int, _is_number = schema.is_int, schema.is_number


def _str_or_none(x) -> bool:
    return x is None or isinstance(x, str)


def _list_of_str(x) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


# header field -> (check, what it must be); fields not listed are free (informational)
_HEADER = {
    "environment": (lambda x: isinstance(x, dict), "an object"),
    "suite": (_str_or_none, "a suite name"),
    "side": (_str_or_none, "a side name"),
    "variants": (lambda x: x is None or _list_of_str(x), "a list of variant names"),
    "peers": (lambda x: x is None or _list_of_str(x), "a list of peer names"),
    "peers_absent": (lambda x: x is None or isinstance(x, dict), "an object"),
    "scenarios": (lambda x: isinstance(x, dict) and all(isinstance(k, str) for k in x), "an object"),
    "metrics": (lambda x: isinstance(x, str) or _list_of_str(x), "a list of metric names"),
    "repeats": (lambda x: x is None or (_is_int(x) and x >= 1), "a positive integer"),
    "samples": (lambda x: x is None or (_is_int(x) and x >= 1), "a positive integer"),
    "gate": (lambda x: isinstance(x, (str, dict)), "a gate's name or identity"),
    "nightly": (lambda x: isinstance(x, dict), "an object"),
    "devices": (lambda x: isinstance(x, list) and all(isinstance(e, dict) for e in x), "a list of objects"),
}
# environment fields the harness reads back
_ENVIRONMENT = {
    "vendor": (_str_or_none, "a vendor name"), "gpu": (_str_or_none, "a GPU name"),
    "commit": (_str_or_none, "a commit sha"), "kernels_tree": (_str_or_none, "a digest"),
    "time": (_str_or_none, "an ISO 8601 time"), "gate": (_str_or_none, "a gate's name"),
    "suite": (_str_or_none, "a suite name"),
}
REASON_KINDS = ("skip", "error", "missing")
_SAMPLES = (lambda x: isinstance(x, list) and x != [] and all(_is_number(v) and v >= 0 for v in x),
            "a non-empty list of finite numbers >= 0")
_RECORD = {  # kind "record": field -> (check, what it must be); all required but the optional ones
    "variant": (lambda x: isinstance(x, str) and x != "", "a variant name"),
    "scenario": (lambda x: isinstance(x, str) and x != "", "a scenario name"),
    "metric": (lambda x: isinstance(x, str) and x != "", "a metric name"),
    "repeat": (lambda x: _is_int(x) and x >= 0, "a repeat number >= 0"),
}
# the measured value, by the file's kind (bounds: perf/schema.py)
_LATENCY = {"samples": _SAMPLES,
            "median": (schema.latency, f"a latency in ms within {schema.span(schema.LATENCY_MS)}")}
_STATIC = {"samples": _SAMPLES, "median": (lambda x: schema.within(x, schema.SECONDS),
                                           f"CPU seconds within {schema.span(schema.SECONDS)}")}
_RECORD_OPTIONAL = {
    "config": (lambda x: isinstance(x, list), "a list"),
    "process": (lambda x: isinstance(x, str), "a process id"),
    "commit": (_str_or_none, "a commit sha"), "kernels_tree": (_str_or_none, "a digest"),
    "p20": (_is_number, "a finite number"), "p80": (_is_number, "a finite number"),
    # device time per kernel of a gate's re-measure (perf/why.py side_field); older records lack it
    "kernel_times": (lambda x: isinstance(x, dict), "an object"),
    # the case's work (perf/roofline.py work): bytes through device memory, flops; older records lack it
    "bytes": (lambda x: _is_int(x) and x >= 0, "an integer >= 0"),
    "flops": (lambda x: _is_int(x) and x >= 0, "an integer >= 0"),
}
_REASON = {
    "variant": (lambda x: isinstance(x, str) and x != "", "a variant name"),
    "scenario": (lambda x: isinstance(x, str) and x != "", "a scenario name"),
    "reason": (lambda x: isinstance(x, str), "the reason as text"),
}


def _check_fields(path: str, where: str, obj: dict, spec: dict, required: bool) -> None:
    schema.check_fields(path, where, obj, spec, required, _FIX)


_short = schema.shown


def _check_header_names(path: str, header: dict) -> None:
    """The header's time, commits and machine by the names rule: they date nights and name files."""
    env, nightly, where = header["environment"], header.get("nightly") or {}, f"{path}: line 1 (header)"
    if env.get("time") is not None:
        names.time(env["time"], f"{where}: environment.time")
    for key, value in (("environment.commit", env.get("commit")), ("nightly.commit", nightly.get("commit"))):
        if value is not None:
            names.commit(value, f"{where}: {key}")
    if nightly.get("machine") is not None:
        names.runner(nightly["machine"], f"{where}: nightly.machine")


def load(path: str, warn: bool = True) -> Results:
    """Read a results file whole, checking every line (perf.files.load_jsonl): the header's
    schema version and fields, each line's kind and the fields of its kind with their types and
    bounds (perf/schema.py), its names (perf/names.py; a measurement's, those the header lists),
    each measurement once, every line of the header's commit. ConfigError naming the file and
    line otherwise; a last line cut short by an interrupted writer is kept aside (`truncated`)
    and, with `warn`, said on stderr (what is read is one line less than the file holds)."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: results file not found; run `python -m perf run --out {path}` first")
    numbered, truncated = files.load_jsonl_numbered(path, "a results file", _FIX)
    if not numbered or numbered[0][1].get("kind") != "header":
        raise ConfigError(f"{path}: no header line; this is not a perf results file ({_FIX})")
    header = numbered[0][1]
    version = header.get("schema_version")
    if not _is_int(version) or version != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {_short(version)}, this harness reads {SCHEMA_VERSION}; "
                          f"re-measure with this version (`python -m perf run`)")
    _check_fields(path, "line 1 (header)", header, _HEADER, required=False)
    if "environment" not in header:
        raise ConfigError(f"{path}: line 1 (header) has no 'environment'; {_FIX}")
    _check_fields(path, "line 1 (header): environment", header["environment"], _ENVIRONMENT, required=False)
    _check_header_names(path, header)
    parsed = [obj for _, obj in numbered]
    _rename_scenarios(parsed)
    static = header.get("gate") == "static" or header["environment"].get("gate") == "static"
    commit = header["environment"].get("commit")
    seen: dict[tuple, str] = {}
    for line, r in numbered[1:]:
        kind = r.get("kind")
        where = f"line {line}"
        if kind == "record":
            _check_fields(path, where, r, _RECORD, required=True)
            _check_fields(path, where, r, _STATIC if static else _LATENCY, required=True)
            _check_fields(path, where, r, _RECORD_OPTIONAL, required=False)
            schema.check_names(path, where, r, header)
            key = (r["variant"], r["scenario"], r["metric"], r["repeat"], r.get("process"))
            key = key if key[4] is not None else key[:4]  # a resumed run's process measures again
            schema.once(path, key, seen, where, "the measurement", "re-measure into a new --out")
        elif kind in REASON_KINDS:
            _check_fields(path, where, r, _REASON, required=True)
            schema.check_names(path, where, r)  # a skip may name a variant the run did not list
        elif kind == "header":
            raise ConfigError(f"{path}: {where} is a second header (two files joined?); {_FIX}")
        else:
            raise ConfigError(f"{path}: {where}: kind {_short(kind)} is none of record, "
                              f"{', '.join(REASON_KINDS)}; {_FIX}")
        if "commit" in r and r["commit"] != commit:
            raise ConfigError(f"{path}: {where} was measured at commit {str(r['commit'])[:10]}, the "
                              f"header's is {str(commit)[:10]}: one file mixes two commits; re-measure "
                              f"into a new --out")
    if truncated is not None and warn:
        print(f"warning: {path}: its last line is cut short (an interrupted run); read without it "
              f"({len(parsed) - 1} lines kept; `perf run` into the same file resumes after them)",
              file=sys.stderr, flush=True)
    return Results(path, header, parsed[1:], truncated)


def _rename_scenarios(parsed: list[dict]) -> None:
    """Files written before the scenarios were renamed name them the old way: read them
    under the current names (same batches: perf/scenarios.py), so histories continue."""
    from perf.scenarios import canonical_name

    names = functools.lru_cache(maxsize=None)(canonical_name)
    head = parsed[0]
    if isinstance(head.get("scenarios"), dict):
        head["scenarios"] = {names(k) if isinstance(k, str) else k: v for k, v in head["scenarios"].items()}
    for r in parsed[1:]:
        if isinstance(r.get("scenario"), str):
            r["scenario"] = names(r["scenario"])


def check_comparable(a: Results, b: Results) -> None:
    """Two files may be compared: distinct files of one kind and suite, with the same settings,
    from the same kind of GPU (ConfigError naming the file and field)."""
    if os.path.exists(a.path) and os.path.exists(b.path) and os.path.samefile(a.path, b.path):
        raise ConfigError(f"{b.path}: the same file as the base; compare the results of two runs "
                          f"(an A/A run is `python -m perf gate --base-ref HEAD --all-cases`)")
    if a.kind != b.kind:
        raise ConfigError(f"{b.path}: a {b.kind} results file, {a.path} is a {a.kind} one; compare files "
                          f"of one gate")
    _check_same_settings(a.header, b.header, b.path, f"compare it with {a.path}")
    ia, ib = _identity(a.environment), _identity(b.environment)
    for key in files.IDENTITY:
        if ia[key] != ib[key]:
            raise ConfigError(f"{b.path}: environment.{key} is {ib[key]!r} but {a.path} has {ia[key]!r}; "
                              f"compare results measured on the same GPU")


def merge(paths: Iterable[str], source_key: str | None = None) -> Results:
    """Several files of one side (e.g. a run and its re-measurement) as one. `source_key`:
    also set that field of every record to its file's index (a paired test's process), in
    these records only: a merge that is written out (the nightly shards) passes none."""
    loaded = [load(p) for p in paths]
    first = loaded[0]
    for i, other in enumerate(loaded):
        if source_key:
            for r in other.records:
                r[source_key] = i
        if i:
            check_comparable(first, other)
            first.records.extend(other.records)
    return first
