"""Results: versioned JSON Lines, appended one record at a time so nothing finished is lost.

A results file starts with a header line (schema version, environment: vendor, GPU, arch,
driver, clocks when readable, torch/triton versions, commit, time) followed by one line per
measurement: (variant, scenario, metric, repeat) with every sample, the median, p20/p80,
the kernel configuration the plan chose (`KernelLaunch.config()` of each launch) and the
batch digest. Scenarios a variant cannot run are recorded as `skip` lines with the reason,
failures as `error` lines: nothing is dropped silently. Each line is flushed and fsynced,
so an interrupted run keeps what finished, and a rerun with the same file resumes.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform as _pyplatform
import shutil
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

from perf import git
from perf.errors import ConfigError, ContextLost, context_lost

SCHEMA_VERSION = 1
METRICS = ("eager", "graph")  # latency per call (ms): launched eagerly; replayed from a CUDA/HIP graph


def _run(cmd: list[str], cwd: str | None = None, timeout: float = 10) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _nvidia_smi() -> dict:
    fields = ("name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "clocks_throttle_reasons.active", "power.limit", "temperature.gpu", "uuid")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    out = _run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                "-i", visible])
    if not out:
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")]
    return dict(zip(fields, values))


def environment(root: str | None = None) -> dict:
    """Where and with what a measurement ran; probes that fail record None."""
    import torch
    import triton

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
    if env["vendor"] == "nvidia":
        smi = _nvidia_smi()
        env["driver"] = smi.get("driver_version")
        env["clocks"] = {k: v for k, v in smi.items() if k.startswith("clocks") or k in
                         ("power.limit", "temperature.gpu")} or None
        env["gpu_uuid"] = smi.get("uuid")
    elif env["vendor"] == "amd":
        env["driver"] = _run(["amd-smi", "version"]) or _run(["rocm-smi", "--showdriverversion"])
        env["clocks"] = _run(["amd-smi", "metric", "--clock"]) or _run(["rocm-smi", "--showclocks"])
    if root is not None:
        env.update(git.commit_info(root))
    return env


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
    """Append-only JSON Lines writer; reopening an existing file resumes it."""

    def __init__(self, path: str, header: dict, resume: bool = True):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.existing = load(path) if resume and os.path.exists(path) and os.path.getsize(path) else None
        if self.existing is not None:
            _check_same_machine(self.existing.environment, header["environment"], path)
            _check_same_settings(self.existing.header, header, path, "resume into it")
            if self.existing.truncated is not None:
                _drop_last_line(path)
                print(f"{path}: its last record was cut short by an interrupted run; dropped it, resuming "
                      f"after {len(self.existing.records)} records", flush=True)
            self._f = open(path, "a", encoding="utf-8")
        else:
            self._f = open(path, "w", encoding="utf-8")
            self._write({"kind": "header", "schema_version": SCHEMA_VERSION, **header})

    def done(self) -> set[tuple]:
        return self.existing.done() if self.existing else set()

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, sort_keys=True) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def record(self, *, variant: str, scenario: str, metric: str, repeat: int, samples,
               config: list[dict], digest: str, **extra) -> None:
        self._write({"kind": "record", "variant": variant, "scenario": scenario, "metric": metric,
                     "repeat": repeat, "samples": list(samples.values), "clock": samples.clock,
                     **samples.summary(), "config": config, "batch_digest": digest, **extra})

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
        self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_same_machine(old: dict, new: dict, path: str) -> None:
    for key in ("vendor", "gpu"):
        if old.get(key) != new.get(key):
            raise ConfigError(f"{path}: environment.{key} is {old.get(key)!r}, this machine has "
                              f"{new.get(key)!r}; resume on the same GPU or write to a new --out file")


def _check_same_settings(old: dict, new: dict, path: str, action: str) -> None:
    for key in SETTINGS:
        if key in old and key in new and old[key] != new[key]:
            raise ConfigError(f"{path}: {key} is {old[key]!r}, this run's is {new[key]!r}; cannot {action} "
                              f"(write to a new --out file, or pass the same settings)")


def _drop_last_line(path: str) -> None:
    """Cut a partial last line (no newline) so that appended records start on a line of their own."""
    with open(path, "rb+") as f:
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)


def load(path: str) -> Results:
    """Parse a results file; ConfigError if it is not one or has another schema version."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
    except FileNotFoundError:
        raise ConfigError(f"{path}: results file not found; run `python -m perf run --out {path}` "
                          f"first") from None
    parsed = []
    truncated = None
    for i, line in enumerate(lines):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1 and i > 0:  # a line cut short by an interrupted run: reported
                truncated = line.strip()
                break
            raise ConfigError(f"{path}: line {i + 1} is not JSON; this is not a perf results file") from None
    if not parsed or parsed[0].get("kind") != "header":
        raise ConfigError(f"{path}: no header line; this is not a perf results file")
    version = parsed[0].get("schema_version")
    if version != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {version!r}, this harness reads {SCHEMA_VERSION}; "
                          f"re-measure with this version (`python -m perf run`)")
    _rename_scenarios(parsed)
    return Results(path, parsed[0], parsed[1:], truncated)


def _rename_scenarios(parsed: list[dict]) -> None:
    """Files written before the scenarios were renamed name them the old way: read them
    under the current names (same batches: perf/scenarios.py), so histories continue."""
    from perf.scenarios import canonical_name

    names = functools.lru_cache(maxsize=None)(canonical_name)
    head = parsed[0]
    if isinstance(head.get("scenarios"), dict):
        head["scenarios"] = {names(k): v for k, v in head["scenarios"].items()}
    for r in parsed[1:]:
        if isinstance(r.get("scenario"), str):
            r["scenario"] = names(r["scenario"])


def check_comparable(a: Results, b: Results) -> None:
    """Two files may be compared: distinct files of one kind and suite, with the same settings,
    from the same kind of GPU (ConfigError naming the file and field)."""
    if os.path.exists(a.path) and os.path.exists(b.path) and os.path.samefile(a.path, b.path):
        raise ConfigError(f"{b.path}: the same file as the base; compare the results of two runs "
                          f"(an A/A run is `python -m perf gate --base-ref HEAD`)")
    if a.kind != b.kind:
        raise ConfigError(f"{b.path}: a {b.kind} results file, {a.path} is a {a.kind} one; compare files "
                          f"of one gate")
    _check_same_settings(a.header, b.header, b.path, f"compare it with {a.path}")
    for key in ("vendor", "gpu"):
        va, vb = a.environment.get(key), b.environment.get(key)
        if va != vb:
            raise ConfigError(f"{b.path}: environment.{key} is {vb!r} but {a.path} has {va!r}; "
                              f"compare results measured on the same GPU")


def write_json(path: str, obj: dict) -> None:
    """Write one JSON document atomically (artifacts: findings, summaries)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=str)
    os.replace(tmp, path)


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
