"""Capturing what `python -m perf` prints, for tests/cli/test_outputs_unchanged.py: the places the
commands run in, the fixture files they read, one driver process per group of cases, and the
normalisation that keeps what a user reads and drops what differs from run to run.

Each group of cases runs in one child process (`python <this file> SPEC`, through runpy so that
tests/ is not on its path) in its own copy of a throwaway repository of the harness
(tests/throwaway_repo.py; four commits, below), with PYTHONPATH naming that copy: every case is
`perf.cli.main(argv)` there, its stdout and stderr captured at the file descriptors (the
command's child processes included) and the files it names rendered right after it ran, before
a later case changes them. A group of cases shares the imports of one process (a refusal that
imports torch costs ~2 s on its own, ~0.1 s here); PERF_OUTPUTS_ALONE=1 runs every case as its
own `python -m perf` process instead, which prints the same (the two were compared when the
golden files were first written).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --- the throwaway repository ------------------------------------------------------------------

# c1's files: what the nightly (asv.conf.json, calibration/), the workflows (.github/), the GPU job and the
# grid (noxfile.py, pyproject.toml) read; .gitignore keeps what the commands write out of `git status`
EXTRAS = ("asv.conf.json", "calibration", ".github", ".gitignore", "noxfile.py", "pyproject.toml",
          "README.md")
# kernels/paged_attention/heuristics.py, NVIDIA's short prefills (perf/latency/plant.py's planted
# heuristic change, made here as text so that this test needs nothing of the harness)
HEURISTICS = Path("kernels", "paged_attention", "heuristics.py")
SHORT_PREFILL = ('num_warps=4, num_stages=2, programs_per_sm=2,\n'
                 '                    source="nvidia/short-prefill')
COMMITS = ("c0", "c1", "c2", "c3")  # the placeholders of the repository's commits, oldest first


def make_repo(path: Path) -> Path:
    """c0: kernels/, perf/, thresholds.yaml (throwaway_repo.harness_repo); c1: the files the
    nightly, the workflows and the GPU job read (EXTRAS); c2: one heuristic branch (NVIDIA's
    short prefills: 8 warps, not 4); c3: docs only (NOTES.md). HEAD is c3."""
    from throwaway_repo import git, harness_repo

    harness_repo(path)
    for name in EXTRAS:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, path / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy(src, path / name)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "c1: the nightly's, the workflows' and the GPU job's files")
    text = (path / HEURISTICS).read_text(encoding="utf-8")
    if text.count(SHORT_PREFILL) != 1:
        raise RuntimeError(f"{HEURISTICS}: NVIDIA's short-prefill branch is not written as "
                           f"{SHORT_PREFILL!r} any more: update tests/outputs_capture.py's SHORT_PREFILL")
    moved = SHORT_PREFILL.replace("num_warps=4", "num_warps=8")
    (path / HEURISTICS).write_text(text.replace(SHORT_PREFILL, moved), encoding="utf-8")
    git(path, "commit", "-qam", "c2: short prefills launch 8 warps")
    (path / "NOTES.md").write_text("a docs-only change\n", encoding="utf-8")
    git(path, "add", "NOTES.md")
    git(path, "commit", "-qm", "c3: docs only")
    return path


def commits_of(repo: Path) -> dict[str, str]:
    """sha -> placeholder (<c0> .. <c3>) of the repository's commits."""
    shas = subprocess.run(["git", "-C", str(repo), "rev-list", "--reverse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.split()
    return {sha: f"<{name}>" for sha, name in zip(shas, COMMITS)}


# --- fixture files: written here as raw JSON, so they pin the formats the commands read ---------

SMOKE = ("tiny/mixed50/batch2-kv16/block16", "tiny/decode/batch1-kv16/block16")  # perf/suites.yaml's smoke
# the environment of a synthetic H100 measurement (the fields perf/results.py and the reports read)
GPU_ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "num_sms": 132,
           "interpreter": False, "driver": "580.65.06", "torch": "2.9.0+cu128", "triton": "3.5.1",
           "python": "3.12.3", "host": "gpu-runner-1", "time": "2026-11-01T03:00:00+00:00"}
WIGGLE = (1.000, 1.004, 0.997, 1.002, 0.999, 1.001)  # repeat-to-repeat spread of the synthetic medians
# (variant, scenario) -> head / base of the synthetic results: a fail, a warn, an improvement
HEAD_FACTORS = {("static_grid", SMOKE[0]): 1.5, ("qblock", SMOKE[0]): 1.04, ("static_grid", SMOKE[1]): 0.6}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def _record(variant: str, scenario: str, metric: str, repeat: int, median: float, **extra) -> dict:
    m = round(median, 6)
    return {"kind": "record", "variant": variant, "scenario": scenario, "metric": metric, "repeat": repeat,
            "samples": [round(m * 0.99, 6), m, round(m * 1.01, 6)], "clock": "device", "median": m,
            "p20": round(m * 0.996, 6), "p80": round(m * 1.004, 6), "n": 3, "reps": 1, "redone": 0,
            "config": [], "batch_digest": "d", **extra}


def _results(side: str, commit: str) -> list[dict]:
    variants = ("naive", "qblock", "static_grid")
    header = {"kind": "header", "schema_version": 1, "suite": "smoke", "side": side, "metrics": ["eager"],
              "repeats": len(WIGGLE), "samples": 3, "variants": list(variants),
              "scenarios": {s: "d" for s in SMOKE}, "environment": {**GPU_ENV, "commit": commit}}
    rows = [header]
    for i, variant in enumerate(variants):
        for j, scenario in enumerate(SMOKE):
            if variant == "naive" and j == 1:
                rows.append({"kind": "skip", "variant": variant, "scenario": scenario,
                             "reason": "variant 'naive' does not support sliding_window"})
                continue
            factor = HEAD_FACTORS.get((variant, scenario), 1.0) if side == "head" else 1.0
            for r, w in enumerate(WIGGLE):
                rows.append(_record(variant, scenario, "eager", r, 0.05 * (i + 1) * (j + 1) * factor * w))
    return rows


def _aa(side: str) -> list[dict]:
    """An A/A gate's results: 3 processes x 4 paired rounds; the head's medians wiggle."""
    header = {"kind": "header", "schema_version": 1, "suite": "smoke", "side": side, "metrics": ["eager"],
              "repeats": 4, "samples": 1, "environment": {**GPU_ENV, "commit": "c" * 40}}
    rows = [header]
    spread = (0.3, -0.5, 0.8, -0.1, 0.4, -0.7, 0.2, 0.6, -0.3, -0.2, 0.5, -0.4)
    for j, scenario in enumerate(SMOKE):
        for k in range(12):
            head = 1 + 0.01 * (j + 1) * spread[(k + 5 * j) % 12]
            m = 0.2 * (j + 1) * (head if side == "head" else 1.0)
            rows.append(_record("static_grid", scenario, "eager", k, m, process=f"p{k // 4}"))
    return rows


NIGHTLY_RUNNER = "runner-1_nvidia-h100"  # a data-branch folder name (perf/names.py RUNNER): <runner>_<gpu>


def _nightly(data: Path) -> None:
    """A nightly history of four commits on one runner, one night each, in the store's layout
    (perf/nightly/store.py: nights/<runner>/<date>/results.jsonl and fingerprint.json); the newest
    is 1.5x slower in one series."""
    for i in range(4):
        sha, day = f"{i + 1:040x}", f"2026-11-0{i + 1}"
        env = {**GPU_ENV, "commit": sha, "time": f"{day}T03:00:00+00:00"}
        night = {"commit": sha, "commit_date": f"{day}T01:00:00+00:00", "machine": NIGHTLY_RUNNER}
        rows = [{"kind": "header", "schema_version": 1, "suite": "smoke", "metrics": ["eager", "graph"],
                 "environment": env, "peers_absent": {"flashinfer_paged": "flashinfer is not installed"},
                 "nightly": night}]
        for k, variant in enumerate(("naive", "qblock", "static_grid")):
            for j, scenario in enumerate(SMOKE):
                for metric in ("eager", "graph"):
                    step = 1.5 if (i == 3 and (variant, j, metric) == ("naive", 1, "graph")) else 1.0
                    for r in range(5):
                        m = 0.05 * (k + 1) * (j + 1) * step * WIGGLE[(r + i + k) % len(WIGGLE)]
                        rows.append(_record(variant, scenario, metric, r, m, commit=sha))
        folder = data / "nights" / NIGHTLY_RUNNER / day
        _jsonl(folder / "results.jsonl", rows)
        # perf/fingerprint.py FIELDS: what NVML would have read, the same every night
        fp = {"gpu_model": GPU_ENV["gpu"], "gpu_uuid": "GPU-1", "vbios": None, "driver": GPU_ENV["driver"],
              "runtime": None, "torch": GPU_ENV["torch"], "triton": GPU_ENV["triton"], "triton_commit": None,
              "image_digest": None, "runner": "runner-1", "vendor": "nvidia", "clocks": None}
        (folder / "fingerprint.json").write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n",
                                                 encoding="utf-8")


def _lax_thresholds(text: str) -> str:
    """thresholds.yaml with NVIDIA's latency and compile-time ratios at 99/100, its noise rule's
    floor too: noise (the interpreter's wall clock, two cold compiles side by side) can never
    decide a verdict, nor what `perf noise` derives from a measured noise (its thresholds,
    max(floor, exp(k x noise)), are then >= 99/100 and no slowdown under 100x is detectable)."""
    for old, new in (("    warn: 1.03\n    fail: 1.05\n", "    warn: 99\n    fail: 100\n"),
                     ("    floor: {warn: 1.005, fail: 1.01}\n", "    floor: {warn: 99, fail: 100}\n"),
                     ("      warn: 1.25", "      warn: 99  "), ("      fail: 1.75", "      fail: 100 ")):
        if old not in text:
            raise RuntimeError(f"thresholds.yaml no longer holds {old!r}: update tests/outputs_capture.py")
        text = text.replace(old, new, 1)
    return text


def write_fixtures(fx: Path) -> None:
    """The files the cases hand to the commands (the test module's docstring lists them)."""
    fx.mkdir(parents=True, exist_ok=True)
    thresholds = (ROOT / "thresholds.yaml").read_text(encoding="utf-8")
    (fx / "thresholds-lax.yaml").write_text(_lax_thresholds(thresholds), encoding="utf-8")
    (fx / "thresholds-broken.yaml").write_text("nvidia:\n  latency: {warn: 1.03}\n", encoding="utf-8")
    _jsonl(fx / "base.jsonl", _results("base", "a" * 40))
    _jsonl(fx / "head.jsonl", _results("head", "b" * 40))
    _jsonl(fx / "header-only.jsonl", _results("base", "a" * 40)[:1])
    _jsonl(fx / "aa" / "base.jsonl", _aa("base"))
    _jsonl(fx / "aa" / "head.jsonl", _aa("head"))
    # the store without --data (perf/nightly/store.py local): perf-data beside asv.conf.json's results_dir
    _nightly(fx / "nightly" / "perf-data")
    conf = json.loads((ROOT / "asv.conf.json").read_text(encoding="utf-8"))
    conf.update(results_dir=str(fx / "nightly" / "results"), html_dir=str(fx / "nightly" / "html"))
    (fx / "nightly" / "asv.conf.json").write_text(json.dumps(conf, indent=1), encoding="utf-8")
    (fx / "not-json.json").write_text("{nope", encoding="utf-8")
    (fx / "a-file").write_text("a file where a folder is wanted\n", encoding="utf-8")
    (fx / "empty").mkdir(exist_ok=True)


# --- the files a case wrote: their structure, not their measured values ------------------------

# keys whose values the structure of a file shows (counted in lists): kinds, verdicts, names; others: types
KEEP = frozenset({"kind", "verdict", "gate", "status", "schema_version", "schema", "side", "suite",
                  "metric", "variant", "scenario", "target", "vendor", "complete", "alert"})


def _desc(key, value) -> str:
    if key in KEEP and isinstance(value, (str, int, bool)) or value is None:
        return json.dumps(value)
    return type(value).__name__


def _shape(value, key=None, indent: str = "") -> list[str]:
    """Lines of `value`'s structure: the keys, list lengths and types; KEEP keys' values."""
    if isinstance(value, dict):
        lines = []
        for k in sorted(value, key=str):
            v = value[k]
            if isinstance(v, (dict, list)) and v:
                lines += [f"{indent}{k}:", *_shape(v, k, indent + "  ")]
            else:
                lines.append(f"{indent}{k}: {json.dumps(v) if isinstance(v, (dict, list)) else _desc(k, v)}")
        return lines
    if isinstance(value, list):
        return [f"{indent}[{len(value)} items]", *_merged(value, key, indent + "  ")]
    return [f"{indent}{_desc(key, value)}"]


def _merged(items: list, key, indent: str) -> list[str]:
    """The structure of a list's items, merged: a dict key absent from some items says in how many
    it is; the KEEP keys' values are counted."""
    dicts = [x for x in items if isinstance(x, dict)]
    others = sorted({_desc(key, x) for x in items if not isinstance(x, dict)})
    lines = [f"{indent}{' | '.join(others)}"] if others else []
    keys = sorted({k for d in dicts for k in d}, key=str)
    for k in keys:
        present = [d[k] for d in dicts if k in d]
        where = "" if len(present) == len(dicts) else f" (in {len(present)} of {len(dicts)})"
        nested = [v for v in present if isinstance(v, (dict, list)) and v]
        if nested:
            flat = [x for v in nested for x in (v if isinstance(v, list) else [v])]
            lengths = sorted({len(v) for v in present if isinstance(v, list)})
            said = f" [lists of {', '.join(map(str, lengths))} items]" if lengths else ""
            lines += [f"{indent}{k}:{said}{where}", *_merged(flat, k, indent + "  ")]
            continue
        counts: dict[str, int] = {}
        for v in present:
            d = json.dumps(v) if isinstance(v, (dict, list)) else _desc(k, v)
            counts[d] = counts.get(d, 0) + 1
        said = ", ".join(f"{d} x{n}" if len(counts) > 1 or k in KEEP else d
                         for d, n in sorted(counts.items()))
        lines.append(f"{indent}{k}: {said}{where}")
    return lines


def render_file(path: Path, label: str) -> str:
    """One file a case wrote, as the golden file shows it (JSON and YAML by structure, JSON Lines
    by kind, text verbatim, images by kind)."""
    head = f"--- file {label}"
    suffix = path.suffix
    try:
        if suffix == ".png":
            return f"{head} (PNG image)\n"
        if suffix == ".log":
            return f"{head} (log: name only)\n"
        text = path.read_text(encoding="utf-8")
        if suffix == ".json":
            return f"{head} (JSON structure)\n" + "\n".join(_shape(json.loads(text))) + "\n"
        if suffix == ".jsonl":
            by_kind: dict[str, list] = {}
            for line in text.splitlines():
                row = json.loads(line)
                by_kind.setdefault(str(row.get("kind")), []).append(row)
            lines = [f"{head} (JSON Lines structure, by kind)"]
            for kind in sorted(by_kind):
                lines += [f"kind {kind}: {len(by_kind[kind])} lines", *_merged(by_kind[kind], None, "  ")]
            return "\n".join(lines) + "\n"
        if suffix in (".yaml", ".yml") and "/.github/" not in str(path):
            import yaml

            return f"{head} (YAML structure)\n" + "\n".join(_shape(yaml.safe_load(text))) + "\n"
        return f"{head}\n{text}" + ("" if text.endswith("\n") else "\n(no newline at end)\n")
    except (OSError, ValueError) as e:  # what the command wrote is not what its name says
        return f"{head} (unreadable: {type(e).__name__}: {e})\n"


def render_outputs(paths: list[str]) -> str:
    """Every file under each of `paths` (a file or a folder), in name order."""
    parts = []
    for given in paths:
        p = Path(given)
        if not p.exists():
            parts.append(f"--- file {given}: absent\n")
        elif p.is_dir():
            names = sorted(str(q.relative_to(p)) for q in p.rglob("*") if q.is_file())
            parts.append(f"--- folder {given}: {len(names)} files\n")
            parts += [render_file(p / n, f"{given}/{n}") for n in names]
        else:
            parts.append(render_file(p, given))
    return "".join(parts)


# --- the cases and the driver: one group's cases in one process ---------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """One invocation: `python -m perf ARGV` ({repo}: the group's copy of the repository, its
    working directory; {out}: a scratch folder; {fx}: the fixture files), the files it writes
    that the golden file shows, which of its numbers are measurements (masked), and its rough
    cost in seconds (the longest groups start first)."""

    id: str
    argv: tuple[str, ...]
    group: str = "cli"
    files: tuple[str, ...] = ()
    measured: str = ""  # "floats": compile times masked; "latency": also every number of a table cell
    cost: float = 0.3
    copies: tuple[tuple[str, str], ...] = ()  # (from, to): files copied before the case runs


def _run_one(argv: list[str], out: Path, err: Path) -> int:
    """`perf.cli.main(argv)` with fds 1 and 2 going to `out` and `err` (children's output too)."""
    from perf import cli

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        os.dup2(fo.fileno(), 1)
        os.dup2(fe.fileno(), 2)
        try:
            return cli.main(list(argv))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def drive(spec_path: str) -> None:
    """Run the cases of SPEC (JSON: cases [{id, argv, files}], dir, alone) in order."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    into = Path(spec["dir"])
    for case in spec["cases"]:
        out, err = into / f"{case['id']}.stdout", into / f"{case['id']}.stderr"
        for src, dst in case["copies"]:
            shutil.copy(src, dst)
        start = time.monotonic()
        if spec["alone"]:
            with open(out, "wb") as fo, open(err, "wb") as fe:
                code = subprocess.run([sys.executable, "-m", "perf", *case["argv"]], stdout=fo,
                                      stderr=fe).returncode
        else:
            code = _run_one(case["argv"], out, err)
        files = render_outputs(case["files"])
        done = {"code": code, "files": files, "seconds": round(time.monotonic() - start, 1)}
        (into / f"{case['id']}.json").write_text(json.dumps(done), encoding="utf-8")


# --- the orchestrator ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Group:
    """Cases that run in one process, one after another, in one copy of the repository."""

    name: str
    interpreter: bool = True  # TRITON_INTERPRET=1 (the static gate's groups compile for real)
    columns: int = 1000  # wide: rich must not wrap lines whose length a temporary path decides


def child_env(group: Group, repo: Path, tmp: Path) -> dict:
    """The environment of a group's process: a user's shell without a GPU, CI or colours."""
    drop = ("GITHUB_", "RUNNER_", "PERF_", "TRITON_", "PAGED_ATTENTION_", "FORCE_COLOR", "NO_COLOR",
            "CLICOLOR", "TERM", "COLUMNS", "LINES", "PYTHON", "CI", "NOX", "PYTEST_", "PIP_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PYTHONPATH=str(repo), TMPDIR=str(tmp), COLUMNS=str(group.columns), LINES="50", TZ="UTC",
               CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", PIP_NO_INDEX="1", PYTHONHASHSEED="0")
    if group.interpreter:
        env["TRITON_INTERPRET"] = "1"
    return env


def _start(group: Group, cases: list, work: Path, alone: bool) -> subprocess.Popen:
    base = work / group.name
    repo, out, tmp, into = base / "repo", base / "out", base / "tmp", base / "captured"
    shutil.copytree(work / "repo", repo, symlinks=True)
    for d in (out, tmp, into):
        d.mkdir(parents=True)
    places = {"{repo}": str(repo), "{out}": str(out), "{fx}": str(work / "fixtures")}

    def fill(text: str) -> str:
        for key, value in places.items():
            text = text.replace(key, value)
        return text
    spec = {"dir": str(into), "alone": alone,
            "cases": [{"id": c.id, "argv": [fill(a) for a in c.argv], "files": [fill(f) for f in c.files],
                       "copies": [[fill(a), fill(b)] for a, b in c.copies]} for c in cases]}
    (base / "spec.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    code = f"import runpy; runpy.run_path({str(Path(__file__))!r}, run_name='__main__')"
    log = open(base / "driver.log", "wb")  # noqa: SIM115 (closed by collect)
    return subprocess.Popen([sys.executable, "-c", code, str(base / "spec.json")], cwd=repo, stdout=log,
                            stderr=subprocess.STDOUT, env=child_env(group, repo, tmp))


def capture(work: Path, groups: list[Group], cases: list, jobs: int = 2, alone: bool = False) -> dict:
    """Run every case (its group's process, `jobs` groups at a time, the longest first) in a
    fresh WORK folder: case id -> {code, stdout, stderr, files, seconds}, raw (not normalised)."""
    work.mkdir(parents=True)
    write_fixtures(work / "fixtures")
    make_repo(work / "repo")
    order = sorted(groups, key=lambda g: -sum(c.cost for c in cases if c.group == g.name))
    running: list[tuple[Group, subprocess.Popen]] = []
    for group in order:
        while len(running) >= jobs:
            running = _reap(running, work)
        running.append((group, _start(group, [c for c in cases if c.group == group.name], work, alone)))
    while running:
        running = _reap(running, work)
    got = {}
    for c in cases:
        into = work / c.group / "captured"
        done = json.loads((into / f"{c.id}.json").read_text(encoding="utf-8"))
        for stream in ("stdout", "stderr"):
            done[stream] = (into / f"{c.id}.{stream}").read_bytes().decode("utf-8", "replace")
        got[c.id] = done
    return got


def _reap(running: list, work: Path) -> list:
    time.sleep(0.2)
    left = []
    for group, proc in running:
        if proc.poll() is None:
            left.append((group, proc))
        elif proc.returncode != 0:
            log = (work / group.name / "driver.log").read_text(encoding="utf-8", errors="replace")
            raise RuntimeError(f"the driver of group {group.name} ended with {proc.returncode}:\n"
                               f"{log[-4000:]}")
    return left


# --- normalisation ------------------------------------------------------------------------------

DROP_LINES = (  # progress said every few seconds: how many lines depends on the machine's speed
    re.compile(r"^\[\s*[\d.]+ min\] still measuring: "),  # the gate's heartbeat (perf/latency/ab.py)
    re.compile(r"^perf run: scenario \d+/\d+, repeat \d+"),  # perf run's, every 10 s
    re.compile(r"^(?:[\w. ()~-]+: )?compiling \d+/\d+"),  # the static gate's, every 15 s
    re.compile(r"^(?:base|head)(?: [^:]*)?: compil(?:ing \d+ specializations|ed \d+/\d+)"),  # racing sides
)
# rich's table borders: a line holding one is a table row, its padding follows the masked numbers
BOX = re.compile(r"[│┃┏┓┗┛┡┩└┘┌┐╇╈┳┻┼╋┠┨┯┷┿╂├┤┬┴]")
RULE = re.compile(r"([━─═])\1+")
CELL_NUMBER = re.compile(r"([|│] +)\d+(?:\.\d+)?(?:e[+-]?\d+)?(?= +[|│])")  # a number alone in a table cell


def placeholders(work: Path, group: str, commits: dict[str, str]) -> dict:
    """What the normaliser replaces, for one group's cases."""
    base = work / group
    paths = {base / "repo": "<repo>", base / "out": "<out>", base / "tmp": "<tmp>",
             work / "fixtures": "<fixtures>", work: "<work>", Path(sys.executable): "<python>",
             Path(sys.prefix): "<venv>", ROOT: "<root>"}
    both = {}
    for p, name in paths.items():
        both[str(p)] = name
        both[os.path.realpath(p)] = name
    import torch
    import triton

    versions = {torch.__version__: "<torch-version>", triton.__version__: "<triton-version>",
                platform.python_version(): "<python-version>"}
    return {"paths": dict(sorted(both.items(), key=lambda kv: -len(kv[0]))), "commits": commits,
            "versions": versions, "host": socket.gethostname()}


def _commit(m: re.Match, commits: dict[str, str]) -> str:
    text = m.group(0)
    for sha, name in commits.items():
        if sha.startswith(text):
            return name
    return text


def normalise(text: str, where: dict, measured: str = "") -> str:
    """The rules of tests/cli/test_outputs_unchanged.py's docstring, in that order; progress lines said
    every few seconds (DROP_LINES) go first, while they still read as the commands print them."""
    text = "\n".join(line for line in text.splitlines() if not any(p.search(line) for p in DROP_LINES))
    for path, name in where["paths"].items():
        text = text.replace(path, name)
    text = re.sub(r"<tmp>/((?:[a-z]+-)+|tmp|\.[\w.-]+?\.)?[a-z0-9_]{8}(?![a-z0-9_])", r"<tmp>/\1<rand>", text)
    text = re.sub(r"\b[0-9a-f]{7,40}\b", lambda m: _commit(m, where["commits"]), text)
    for version, name in where["versions"].items():
        text = re.sub(rf"(?<![\w.+]){re.escape(version)}(?![\w+]|\.\d)", name, text)
    host = re.escape(where["host"])
    text = re.sub(rf"(?<![A-Za-z0-9]){host}(?![A-Za-z0-9])", "<host>", text)
    text = re.sub(r"\bpid \d+", "pid <pid>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?", "<datetime>",
                  text)
    text = re.sub(r"\b\d{4}-\d\d-\d\d\b", "<date>", text)
    text = re.sub(r"\b\d{1,2}:\d\d:\d\d\b", "<time>", text)
    text = re.sub(r"\[\s*\d+\.\d min\]", "[<dur>]", text)
    text = re.sub(r"\b\d+(?:\.\d+)? ?(?:s|seconds|min|minutes)\b", "<dur>", text)
    text = re.sub(r"compiled \d+ \(base\) \+ \d+ \(head\)", "compiled <n> (base) + <n> (head)", text)
    if measured:  # not the thresholds a verdict applies: those are settings
        text = re.sub(r"(?<![\w.<])(?<!warn > )(?<!fail > )\d+\.\d+(?:e[+-]?\d+)?(?![\w.])", "<n>", text)
        # a compile time is CPU seconds in clock ticks (10 ms): 1 s prints as "1", 9999.5 s as "1e+04"
        text = re.sub(r"(?m)^[|│].*[|│] +compile_time +[|│].*$",
                      lambda row: CELL_NUMBER.sub(r"\1<n>", row.group(0)), text)
    if measured == "latency":
        text = CELL_NUMBER.sub(r"\1<n>", text)
        text = re.sub(r"(?:slower, significant, within|faster beyond) the warn threshold(?:, significant)?; ",
                      "", text)  # the significance of an A/A run's noise
        text = re.sub(r"(?m)^(\s*samples: \[lists of )\d+(?:, \d+)*", r"\1<n>", text)  # within a time budget
    lines = []
    for line in text.splitlines():
        if BOX.search(line) or RULE.search(line):
            line = RULE.sub(r"\1", re.sub(r" {2,}", " ", line))
        lines.append(line.rstrip())
    lines = _untitle(lines)
    return "\n".join(_sort_rows(lines) if measured else lines) + ("\n" if lines else "")


def _sort_rows(lines: list[str]) -> list[str]:
    """The rows of each Markdown table in name order: findings are listed worst first, then by
    ratio, and a measured ratio orders rows of one verdict differently from run to run."""
    out: list[str] = []
    rows: list[str] = []
    for line in [*lines, ""]:
        if line.startswith("| ") and out and (rows or out[-1].startswith("|---")):
            rows.append(line)
            continue
        out += sorted(rows)
        rows = []
        out.append(line)
    return out[:-1]


def _untitle(lines: list[str]) -> list[str]:
    """A rich table's title is centred over the table, whose width follows the masked numbers."""
    return [line.strip() if i + 1 < len(lines) and lines[i + 1].lstrip().startswith(("┏", "┌")) else line
            for i, line in enumerate(lines)]


if __name__ == "__main__":
    try:
        drive(sys.argv[1])
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
