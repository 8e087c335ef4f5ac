"""asv draws the nightly's published history site from the store: its results written by one step
of ours, then `asv publish`.

The nightly measures every case in one process of its own (perf/nightly/collect.py) and keeps the
night in its store (perf/nightly/store.py); asv measures nothing and runs no benchmark. `record`
writes, in this process, what `asv run` would have written for this interpreter
(`existing:<python>`) from every night of the store (perf/nightly/history.py: a commit's newest
night): `benchmarks.json` (the benchmarks of perf/asv/benchmarks.py, with the store's variants,
libraries and scenarios as their parameters), `machine.json` per machine and one results file per
machine and commit; `publish` then runs `asv publish`, the one asv process of a night. Before,
`asv run` started a process per benchmark and parameter combination to read the numbers back
(2 x 7 x 186 = 2,604 for the nightly suite with two vendor libraries). asv's results folder is a
view of the store: every publish writes it again, so losing it (the Actions cache) loses nothing.
Paths in asv.conf.json are relative to its folder, where asv is started.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import itertools
import json
import math
import os
import re
import sys

from perf.errors import ConfigError
from perf.nightly.selection import PEER_PREFIX

CONFIG = "asv.conf.json"
REQUIRED = {  # asv.conf.json keys the nightly relies on, and the value it must have (None: any)
    "version": 1, "environment_type": "existing", "branches": ["HEAD"], "launch_method": "spawn",
    "repo": ".", "benchmark_dir": None, "results_dir": None, "html_dir": None,
}
# What asv knows the nightly's numbers by (perf/asv/benchmarks.py defines the same classes, a test
# keeps them equal): the module as asv names it inside benchmark_dir; per class the prefix of its
# series' names in the results (perf.results) and its parameter names; per method the metric.
MODULE = "benchmarks"
CLASSES = (("PagedAttention", "", ("variant", "scenario")),
           ("VendorLibrary", PEER_PREFIX, ("library", "scenario")))
METHODS = {"track_latency_ms": "eager", "track_graph_ms": "graph"}
VERSION = "1"  # pinned, so that editing a body keeps asv's history (perf/asv/benchmarks.py)
UNIT = "ms"
TIMEOUT = 120  # asv's per-benchmark limit of a developer's own `asv run`: a lookup
# asv's file format versions (asv 0.6: Results.api_version, Benchmarks.api_version, Machine.api_version)
RESULTS_API, BENCHMARKS_API, MACHINE_API = 2, 2, 1
# asv's result columns (asv.results.Results.save); ours fill the first four
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
           "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]


def read_config(path: str = CONFIG) -> dict:
    """asv.conf.json, checked for what the nightly needs (ConfigError naming the key)."""
    try:
        with open(path, encoding="utf-8") as f:
            conf = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; run from the repository root or pass --config PATH") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno}: invalid JSON ({e.msg}); fix the syntax") from None
    for key, want in REQUIRED.items():
        if key not in conf:
            raise ConfigError(f"{path}: missing key {key!r}; restore it from the repository")
        if want is not None and conf[key] != want:
            raise ConfigError(f"{path}: {key} is {conf[key]!r}, the nightly needs {want!r}")
    base = os.path.dirname(os.path.abspath(path))
    conf["_root"] = base
    for key in ("benchmark_dir", "results_dir", "html_dir"):
        conf[f"_{key}"] = os.path.normpath(os.path.join(base, conf[key]))
    return conf


def require_asv() -> None:
    if importlib.util.find_spec("asv") is None:
        raise ConfigError("asv is not installed in this interpreter; `pip install 'asv>=0.6'` next to the "
                          "vendor's torch (never in a virtualenv of its own: asv runs the benchmarks here)")


def asv(conf: dict, *args: str, env: dict | None = None) -> int:
    """Run `python -m asv ARGS --config CONF` in the config's folder; output goes to ours."""
    from perf.process import child_env, run_child

    cmd = [sys.executable, "-m", "asv", *args, "--config", os.path.join(conf["_root"], CONFIG)]
    print("+ " + " ".join(cmd), flush=True)
    root = conf["_root"]
    return run_child(cmd, cwd=root, env=child_env(root, **(env or {}))).returncode


def publish(conf: dict, histories: list, bench: list[str] | None = None) -> None:
    """asv's results written from the store's histories (`record`), then `asv publish`."""
    n = record(conf, histories, bench)
    print(f"nightly: asv's results of {n} commits of {len(histories)} machines written from the store into "
          f"{conf['_results_dir']}", flush=True)
    rc = asv(conf, "publish")
    if rc:
        raise ConfigError(f"`asv publish` failed (exit {rc}); see its output above")


# --- asv's files, from the store ------------------------------------------------------------------


def record(conf: dict, histories: list, bench: list[str] | None = None) -> int:
    """Write asv's benchmarks.json, each machine's machine.json and each commit's results file
    into asv's results folder from `histories` (perf.nightly.history.History, one per machine);
    `bench`: regular expressions, as `asv run --bench` matches them (the others are left out).
    The number of results files written."""
    from perf import files

    benchmarks = describe(conf, histories)
    root = conf["_results_dir"]
    _write(files, os.path.join(root, "benchmarks.json"), {**benchmarks, "version": BENCHMARKS_API})
    python = sys.executable  # the interpreter asv is run in, as `-E existing:<python>` names it
    env_name = "existing-py" + re.sub('[<>:"/\\\\^|?*\x00-\x1f]', "_", python)  # asv.util.sanitize_filename
    written = 0
    for h in histories:
        env = h.latest.environment
        _write(files, os.path.join(root, h.machine, "machine.json"), {
            "machine": h.machine, "arch": env.get("arch") or "", "cpu": env.get("gpu") or "", "os": "",
            "num_cpu": "", "ram": "", "version": MACHINE_API})
        for c in h.commits:
            rows = {name: _row(h, b, c, bench) for name, b in benchmarks.items()}
            _write(files, os.path.join(root, h.machine, f"{c.sha[:8]}-{env_name}.json"), {
                "commit_hash": c.sha, "env_name": env_name, "date": _js_time(c.date),
                "params": {"machine": h.machine, "python": python}, "python": python, "requirements": {},
                "env_vars": {}, "result_columns": COLUMNS, "results": rows, "durations": {},
                "version": RESULTS_API})
            written += 1
    return written


def describe(conf: dict, histories: list) -> dict:
    """benchmarks.json's entries (asv_runner's discovery record of perf/asv/benchmarks.py): every
    class that has series in the store, with the names and scenarios of every history as its
    parameters (asv's repr of each value), in the order they were first measured."""
    scenarios = list(dict.fromkeys(s for h in histories for s in h.scenarios()))
    code = _code(os.path.join(conf["_benchmark_dir"], f"{MODULE}.py"))
    out = {}
    for cls, prefix, param_names in CLASSES:
        names = list(dict.fromkeys(n.removeprefix(prefix) for h in histories
                                   for n in h.names(peers=bool(prefix))))
        if not names:
            continue
        params = [[repr(n) for n in names], [repr(s) for s in scenarios]]
        for method in METHODS:
            name = f"{MODULE}.{cls}.{method}"
            out[name] = {"code": code.get(method, ""), "name": name, "param_names": list(param_names),
                         "params": params, "timeout": TIMEOUT, "type": "track", "unit": UNIT,
                         "version": VERSION}
    return out


def _row(h, b: dict, commit, bench: list[str] | None) -> list:
    """One benchmark's row of a commit's results file: its values in the order of its parameters'
    product (None: not measured, skipped or failed; asv shows n/a), the parameters, the version
    and when the night measured it."""
    _, cls, method = b["name"].split(".")
    prefix, metric = dict((c, p) for c, p, _ in CLASSES)[cls], METHODS[method]
    values = []
    for combo in itertools.product(*b["params"]):
        label = f"{b['name']}({', '.join(combo)})"
        name, scenario = (_unrepr(x) for x in combo)
        x = h.value(prefix + name, scenario, metric, commit.sha)
        wanted = not bench or any(re.search(r, label) for r in bench)
        values.append(x if wanted and math.isfinite(x) else None)
    return [values if any(v is not None for v in values) else None, b["params"], VERSION,
            _js_time(commit.measured)]


def _unrepr(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def _js_time(iso: str) -> int | None:
    """A JavaScript timestamp (ms since the epoch, asv's dates) of an ISO 8601 time; None if none."""
    try:
        when = _dt.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp() * 1000)


def _code(path: str) -> dict[str, str]:
    """Method -> the source asv shows for it: the class that defines the benchmark methods, cut to
    that method, setup and setup_cache (asv_runner's `code`); {} where the file cannot be read."""
    import ast

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = ast.parse(text)
    except (OSError, SyntaxError):
        return {}
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        defs = {d.name: ast.get_source_segment(text, d, padded=True) for d in node.body
                if isinstance(d, ast.FunctionDef)}
        for method in METHODS:
            if method in defs:
                parts = [defs[m] for m in (method, "setup", "setup_cache") if m in defs]
                out[method] = f"class {node.name}:\n" + "\n\n".join(parts)
    return out


def _write(files, path: str, doc: dict) -> None:
    """One of asv's files, compact (asv writes them so; NaN is no JSON)."""
    files.write_text(path, json.dumps(doc, separators=(",", ":"), allow_nan=False))


# --- a developer's own `asv run`: the night's medians, read once ---------------------------------------


def summarize(path: str) -> dict:
    """Per (name, scenario): the median of the repeat medians of each metric, the reason it
    was skipped (a feature it lacks, a library that is absent) or why it failed."""
    import numpy as np

    from perf import results

    res = results.load(path)
    out: dict[tuple[str, str], dict] = {}
    for (name, scenario, metric), medians in res.medians().items():
        out.setdefault((name, scenario), {})[metric] = float(np.median(medians))
    for r in res.skips():
        entry = out.setdefault((r["variant"], r["scenario"]), {})
        reason = r["reason"]
        metric = reason.split(":", 1)[0] if reason.split(":", 1)[0] in METHODS.values() else None
        if metric is not None:
            entry.setdefault("errors", {})[metric] = reason
        elif r["kind"] == "error":
            entry["error"] = reason
        else:
            entry["skip"] = reason
    return {"path": os.path.abspath(path), "cases": out, "environment": res.environment}


def night_of_head(root: str) -> str:
    """The results file of this checkout's commit in the local store (its newest night), for a
    developer's own `asv run`; ConfigError where the store holds none."""
    from perf import git
    from perf.nightly import store

    sha, _ = git.head_commit(root)
    data = store.local(read_config(os.path.join(root, CONFIG))["_results_dir"])
    found = []
    for night in store.nights(data):
        try:
            if store.commit_of(night.results()) == sha:
                found.append(night)
        except ConfigError:
            continue
    if not found:
        raise ConfigError(f"{data}: no night of commit {sha[:8]}; run `python -m perf nightly run` first "
                          f"(asv reads the nightly's store, it measures nothing)")
    return max(found, key=lambda n: n.date).results_path
