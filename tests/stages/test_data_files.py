"""The readers of measured data, one per file kind, fed broken files: results (perf.results.load),
findings (perf.verdicts.load_findings), the gate's ledger (perf.latency.ab.load_ledger) and the
nightly history (perf.nightly.history).

Every broken file ends in one line naming the file (and the line or field), exit 2, never a
traceback, and a command that reads a file never passes with fewer cases than the file holds
unless it says so. The fixed cases pin each rule; the hypothesis tests mutate real-looking files
(fields dropped, wrong types, `{}` lines, JSON lists, truncation at a random byte, invalid UTF-8,
other schema versions, duplicated lines) and run the commands in-process (`perf.cli.main`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf import cli, results
from perf.errors import ConfigError, NothingMeasured
from perf.latency import ab
from perf.measure.timing import Samples
from perf.verdicts import Finding, Verdict, load_findings

ROOT = Path(__file__).resolve().parents[2]
THRESHOLDS = str(ROOT / "thresholds.yaml")
COMMIT = "c0ffee" + "0" * 34
ENV = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "interpreter": False,
       "commit": COMMIT, "dirty": False, "kernels_tree": "0123456789abcdef",
       "time": "2026-11-27T00:00:00+00:00"}
SCENARIOS = ("llama3-8b/decode/batch8-kv1024/block16", "llama3-8b/prefill/batch2-kv2048/block16")
VARIANTS = ("qblock", "static_grid")
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def write_results(path: Path, scale: float = 1.0, env: dict | None = None, **header) -> Path:
    """A results file as `perf run` writes it: 2 variants x 2 scenarios x 2 metrics x 3 repeats, a skip."""
    head = {"environment": {**ENV, **(env or {})}, "suite": "pr", "side": None, "variants": list(VARIANTS),
            "scenarios": {s: "d" for s in SCENARIOS}, "metrics": ["eager", "graph"], "repeats": 3,
            "samples": 5,
            "peers": [], "peers_absent": {}, **header}
    with results.ResultsWriter(str(path), head, resume=False) as w:
        for v in VARIANTS:
            for s in SCENARIOS:
                for m in ("eager", "graph"):
                    for r in range(3):
                        ms = scale * (0.1 + 0.01 * r) * (2 if m == "eager" else 1)
                        w.record(variant=v, scenario=s, metric=m, repeat=r, samples=Samples((ms,) * 5),
                                 config=[{"kernel": "k", "grid": [1, 2, 3]}], digest="d")
        w.skip(variant="naive", scenario=SCENARIOS[1], reason="variant 'naive' lacks softcap")
    return path


def _finding(verdict=Verdict.OK, ratio: float | None = 1.0, scenario: str = SCENARIOS[0]) -> Finding:
    return Finding("latency", "nvidia", ENV["gpu"], "qblock", scenario, "graph", 0.1,
                   None if ratio is None else 0.1 * ratio, ratio, ratio and ratio - 0.01,
                   ratio and ratio + 0.01, 0.2, "warn > 1.03, fail > 1.05", verdict, "")


def write_findings(folder: Path) -> Path:
    """A findings.json as the gate writes it (perf.latency.ab.write_outputs)."""
    findings = [_finding(Verdict.OK, 1.0), _finding(Verdict.WARN, 1.04, SCENARIOS[1]),
                _finding(Verdict.OK, None, "llama3-8b/decode/batch1-kv128/block16")]
    ab.write_outputs(str(folder), findings, "A/B", ["a note"], {"vendor": "nvidia"},
                     {("qblock", SCENARIOS[0], "graph"): (1.03, 1.05)})
    return folder / "findings.json"


def run_cli(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """(exit code, stderr lines, stdout) of `python -m perf ARGV`, in-process."""
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if line.strip()], out


def assert_one_line(code: int, err: list[str], *needles: str) -> None:
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    for n in needles:
        assert n in err[0], (n, err[0])


# --- results files: the one reader ------------------------------------------------------------

def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _rewrite(path: Path, rows: list) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


@pytest.mark.parametrize("change, needle", [
    (lambda rows: rows.insert(3, {}), "line 4: kind None is none of record"),
    (lambda rows: rows.insert(2, [1, 2]), "line 3 is a JSON list, not an object"),
    (lambda rows: rows[1].pop("median"), "line 2 has no 'median'"),
    (lambda rows: rows[1].update(repeat="0"), "line 2: repeat is '0', expected a repeat number"),
    (lambda rows: rows[1].update(samples=[]), "line 2: samples is [], expected a non-empty list"),
    (lambda rows: rows[1].update(median=float("nan")), "line 2: median is nan"),
    (lambda rows: rows[1].update(median=0.0), "line 2: median is 0.0, expected a latency"),
    (lambda rows: rows[-1].pop("reason"), "has no 'reason'"),
    (lambda rows: rows.insert(2, dict(rows[1])), "line 3 repeats the measurement of line 2"),
    (lambda rows: rows.insert(5, dict(rows[0])), "line 6 is a second header"),
    (lambda rows: rows[3].update(commit="f" * 40), "line 4 was measured at commit ffffffffff"),
    (lambda rows: rows[0].update(schema_version=2), "schema_version 2, this harness reads 1"),
    (lambda rows: rows[0].update(schema_version=True), "schema_version True"),
    (lambda rows: rows[0].update(environment=[]), "environment is [], expected an object"),
    (lambda rows: rows[0].update(samples="5"), "samples is '5', expected a positive integer"),
    (lambda rows: rows[0].pop("kind"), "no header line"),
    (lambda rows: rows[1].update(kind="measurement"), "kind 'measurement' is none of record"),
])
def test_a_broken_results_file_is_one_line_naming_the_line(tmp_path, capsys, change, needle):
    path = write_results(tmp_path / "r.jsonl")
    rows = _lines(path)
    change(rows)
    _rewrite(path, rows)
    with pytest.raises(ConfigError, match="r.jsonl: "):
        results.load(str(path))
    code, err, _ = run_cli(["table", str(path)], capsys)
    assert_one_line(code, err, "r.jsonl", needle)


def test_bytes_that_are_not_utf8_or_json_lines(tmp_path, capsys):
    path = write_results(tmp_path / "r.jsonl")
    data = path.read_bytes()
    path.write_bytes(data[:200] + b"\xff\xfe" + data[200:])
    assert_one_line(*run_cli(["table", str(path)], capsys)[:2], "not UTF-8")
    path.write_text("not json\nat all\n")
    assert_one_line(*run_cli(["table", str(path)], capsys)[:2], "line 1 is not JSON")
    path.write_text("")
    assert_one_line(*run_cli(["table", str(path)], capsys)[:2], "no header line")
    assert_one_line(*run_cli(["table", str(tmp_path)], capsys)[:2], "is a directory")


def test_a_line_cut_short_is_said_on_stderr_and_the_rest_read(tmp_path, capsys):
    path = write_results(tmp_path / "r.jsonl")
    full = len(results.load(str(path)).measurements())
    capsys.readouterr()
    data = path.read_bytes()
    path.write_bytes(data[:-30])  # the skip line loses its end: an interrupted writer
    code, err, out = run_cli(["table", str(path)], capsys)
    assert code == 0 and len(err) == 1 and "cut short" in err[0] and "r.jsonl" in err[0]
    assert len(results.load(str(path), warn=False).measurements()) == full
    last_record = data.rstrip(b"\n").rsplit(b"\n", 1)[0]  # cut right after a complete record
    path.write_bytes(last_record)
    res = results.load(str(path), warn=False)
    assert res.truncated is None and len(res.measurements()) == full


def test_a_file_of_skips_only_is_nothing_measured(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    with results.ResultsWriter(str(path), {"environment": ENV, "suite": "pr"}) as w:
        w.skip(variant="naive", scenario=SCENARIOS[0], reason="no softcap")
    code, err, _ = run_cli(["table", str(path)], capsys)
    assert_one_line(code, err, "nothing was measured", "1 skip or error lines")


# --- findings files: the one reader ---------------------------------------------------------------

@pytest.mark.parametrize("doc, needle", [
    ([], "holds a JSON list, expected a JSON object"),
    ({}, "no `findings` list"),
    ({"findings": {"a": 1}}, "`findings` is a JSON dict"),
    ({"kind": "findings", "schema_version": 99, "findings": []}, "schema_version 99"),
    ({"kind": "latency", "findings": []}, "kind 'latency', not a findings file"),
    ({"findings": [[1]]}, "findings[0] is a JSON list"),
    ({"findings": [{"gate": "latency"}]}, "findings[0] has no 'base'"),
])
def test_a_broken_findings_file_is_one_line(tmp_path, capsys, doc, needle):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError):
        load_findings(str(path))
    assert_one_line(*run_cli(["report", str(path)], capsys)[:2], "findings.json", needle)


@pytest.mark.parametrize("field, value, needle", [
    ("verdict", "meh", "findings[1].verdict is 'meh'"),
    ("ratio", "1.2", "findings[1]: ratio is '1.2'"),
    ("variant", 3, "findings[1]: variant is 3"),
    ("note", None, "findings[1]: note is None"),
    ("extra", 1, "unknown field 'extra'"),
])
def test_a_malformed_finding_is_named_by_index_and_field(tmp_path, capsys, field, value, needle):
    path = write_findings(tmp_path)
    doc = json.loads(path.read_text())
    doc["findings"][1][field] = value
    path.write_text(json.dumps(doc))
    assert_one_line(*run_cli(["report", str(path)], capsys)[:2], needle)


def test_report_of_no_finding_or_none_compared_is_nothing_measured(tmp_path, capsys):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps({"kind": "findings", "schema_version": 2, "findings": []}))
    assert_one_line(*run_cli(["report", str(path)], capsys)[:2], "nothing was measured: no case at all")
    skipped = _finding(Verdict.OK, None)
    skipped.note = "skipped on both sides: no softcap"
    other = Finding(**{**skipped.__dict__, "metric": "eager"})  # the same case twice is refused
    path.write_text(json.dumps({"kind": "findings", "findings": [skipped.to_dict(), other.to_dict()]}))
    code, err, out = run_cli(["report", str(path)], capsys)
    assert_one_line(code, err, "nothing was measured", "2 skipped on both sides")
    assert "**nothing measured**" in out and "**pass**" not in out  # the rendered report says so too
    static = Finding("static", "nvidia", "sm_90", "naive", "s", "k/registers", None, 40, None, None, None,
                     None, "warn > 1.1", Verdict.OK, "new kernel")
    path.write_text(json.dumps({"findings": [static.to_dict()]}))  # a static gate's: no version, counts
    assert run_cli(["report", str(path)], capsys)[0] == 0


def test_report_plot_thresholds_and_outputs(tmp_path, capsys):
    path = write_findings(tmp_path / "gate")
    assert (tmp_path / "gate" / "ratios.png").exists()
    code, err, _ = run_cli(["report", str(path), "--plot", str(tmp_path / "p.png")], capsys)
    assert code == 0 and (tmp_path / "p.png").exists()
    doc = json.loads(path.read_text())
    doc["thresholds"] = {"qblock only-two": [1.03, 1.05]}
    path.write_text(json.dumps(doc))
    assert_one_line(*run_cli(["report", str(path)], capsys)[:2], "thresholds['qblock only-two']")
    plot_dir = run_cli(["report", str(path), "--plot", str(tmp_path)], capsys)
    assert_one_line(*plot_dir[:2], "--plot", "directory")


# --- the gate's ledger ------------------------------------------------------------------------------

def test_the_ledger_is_read_whole_and_guards_what_is_beside_it(tmp_path, capsys):
    ident = {"base": "a", "head": "b", "machine": {"vendor": "nvidia", "gpu": "H100", "interpreter": False}}
    (tmp_path / "gate.json").write_text("[]")
    with pytest.raises(ConfigError, match="gate.json: the gate's ledger holds a JSON list"):
        ab.Ledger(str(tmp_path), ident)
    (tmp_path / "gate.json").write_text(json.dumps({"identity": ident, "processes": [{"attempt": "0"}]}))
    with pytest.raises(ConfigError, match=r"processes\[0\] needs a `process` id"):
        ab.Ledger(str(tmp_path), ident)
    (tmp_path / "gate.json").unlink()
    write_results(tmp_path / "base.jsonl")  # measured data that no gate's ledger vouches for
    with pytest.raises(ConfigError, match="holds base.jsonl but no gate.json"):
        ab.Ledger(str(tmp_path), ident)
    assert (tmp_path / "base.jsonl").exists()
    (tmp_path / "base.jsonl").unlink()
    ab.Ledger(str(tmp_path), ident).add({"attempt": 0, "index": 0, "process": "p", "first_repeat": 0,
                                         "pairs": 1})
    write_results(tmp_path / "base.jsonl")
    (tmp_path / "findings.json").write_text("{}")
    other_gpu = {**ident, "machine": {**ident["machine"], "interpreter": True, "gpu": "Triton interpreter"}}
    with pytest.raises(ConfigError, match="pass --force"):
        ab.Ledger(str(tmp_path), other_gpu)  # another machine's gate: only with --force
    assert ab.Ledger(str(tmp_path), ident).resumed == 1  # the same gate resumes
    capsys.readouterr()
    again = ab.Ledger(str(tmp_path), {**ident, "head": "c"})  # another gate of this machine: replaced, said
    assert again.resumed == 0 and not (tmp_path / "base.jsonl").exists()
    assert not (tmp_path / "findings.json").exists()  # an earlier gate's verdict is never read as this one's
    assert "holds another gate's measurements (base a, head b" in capsys.readouterr().err
    ab.Ledger(str(tmp_path), other_gpu, force=True)


def test_a_keys_file_is_checked(tmp_path):
    from perf.latency.worker import load_keys

    path = tmp_path / "retry1-keys.json"
    path.write_text(json.dumps([["qblock", "s", "graph"]]))
    assert load_keys(str(path)) == {("qblock", "s", "graph")}
    path.write_text(json.dumps([["qblock", "s"]]))
    with pytest.raises(ConfigError, match="entry 0"):
        load_keys(str(path))


# --- hypothesis: mutate real-looking files and run the commands ----------------------------------

MUTATIONS = ("drop_field", "wrong_type", "empty_object", "json_list", "truncate", "invalid_utf8",
             "schema_version", "duplicate_line", "blank_line")
WRONG = (None, "x", [], {}, -1, 1.5, True, [1.0, "a"], 1e308 * 10)


@st.composite
def mutated(draw, data: bytes) -> tuple[str, bytes]:
    """One mutation of a JSON Lines (or JSON) file: its name and the new bytes."""
    kind = draw(st.sampled_from(MUTATIONS))
    lines = data.decode().splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    if kind == "truncate":
        return kind, data[:draw(st.integers(0, len(data) - 1))]
    if kind == "invalid_utf8":
        at = draw(st.integers(0, len(data)))
        return kind, data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + data[at:]
    if kind in ("empty_object", "json_list", "blank_line"):
        lines.insert(i, {"empty_object": "{}", "json_list": "[1, 2]", "blank_line": "   "}[kind])
    elif kind == "duplicate_line":
        lines.insert(i, lines[i])
    else:
        obj = json.loads(lines[i])
        if kind == "schema_version":
            obj = json.loads(lines[0])
            i = 0
            obj["schema_version"] = draw(st.sampled_from([0, 2, "1", None, 1.0]))
        elif obj:
            key = draw(st.sampled_from(sorted(obj)))
            if kind == "drop_field":
                obj.pop(key)
            else:
                obj[key] = draw(st.sampled_from(WRONG))
        lines[i] = json.dumps(obj)
    return kind, ("\n".join(lines) + "\n").encode()


def _parseable_records(data: bytes) -> int:
    """Lines of `data` that are JSON objects of kind record: what a reader may not silently drop."""
    n = 0
    for line in data.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            n += isinstance(obj, dict) and obj.get("kind") == "record"
    return n


def _holds_all_or_says_so(path: Path, data: bytes, err: list[str]) -> None:
    """A reader that accepted the file read every record it holds, or said on stderr what it left."""
    res = results.load(str(path), warn=False)
    said = any(path.name in line and "cut short" in line for line in err)
    assert len(res.measurements()) == _parseable_records(data) or said, err


@functools.cache
def _pristine() -> dict[str, bytes]:
    """The unbroken files the fuzz tests mutate (made once; not a fixture, so that a falsifying
    example prints the mutation, not the whole file)."""
    folder = Path(tempfile.mkdtemp(prefix="perf-pristine-"))
    try:
        return {"results": write_results(folder / "r.jsonl").read_bytes(),
                "base": write_results(folder / "b.jsonl", scale=1.0).read_bytes(),
                "findings": write_findings(folder / "gate").read_bytes()}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@FUZZ
@given(data=st.data())
def test_fuzzed_results_files_end_in_a_result_or_one_line(tmp_path, capsys, data):
    pristine = _pristine()
    kind, mutant = data.draw(mutated(pristine["results"]))
    head = tmp_path / "head.jsonl"
    base = tmp_path / "base.jsonl"
    head.write_bytes(mutant)
    base.write_bytes(pristine["base"])
    capsys.readouterr()
    for argv in (["table", str(head)], ["compare", str(base), str(head), "--thresholds", THRESHOLDS]):
        code, err, _ = run_cli(argv, capsys)
        assert code in (0, 1, 2), (kind, argv, code, err)
        if code == 2:
            assert len(err) == 1 and err[0].startswith("error: "), (kind, err)
        else:
            _holds_all_or_says_so(head, mutant, err)


@FUZZ
@given(data=st.data())
def test_fuzzed_findings_files_end_in_a_verdict_or_one_line(tmp_path, capsys, data):
    from perf.ci import comment

    raw = json.loads(_pristine()["findings"])
    # the findings list one per line, so that line mutations hit findings and the document alike
    flat = "\n".join([json.dumps({k: v for k, v in raw.items() if k != "findings"}),
                      *(json.dumps(f) for f in raw["findings"])]).encode()
    kind, mutant = data.draw(mutated(flat))
    shape = data.draw(st.sampled_from(["document", "lines"]))
    path = tmp_path / "findings.json"
    if shape == "document":  # reassemble the mutated lines into one findings document where possible
        try:
            rows = [json.loads(x) for x in mutant.decode().splitlines() if x.strip()]
            doc = {**rows[0], "findings": rows[1:]} if isinstance(rows[0], dict) else rows
            mutant = json.dumps(doc).encode()
        except (ValueError, IndexError, UnicodeDecodeError):
            pass
    path.write_bytes(mutant)
    code, err, out = run_cli(["report", str(path)], capsys)
    assert code in (0, 1, 2), (kind, code, err)
    if code == 2:
        assert len(err) == 1 and err[0].startswith("error: "), (kind, err)
    else:  # a verdict: from something compared (a FAIL stands on its own), said in the headline
        _, findings = load_findings(str(path))
        assert code == 1 or any(f.ratio is not None for f in findings), (kind, findings)
        assert "**nothing measured**" not in out
    rc = comment.cli([str(path), "--vendor", "nvidia"])
    _, cerr = capsys.readouterr()
    assert rc in (0, 2) and "Traceback" not in cerr
    assert rc == 0 or (len(cerr.strip().splitlines()) == 1 and cerr.startswith("error: ")), cerr


# --- the nightly history -----------------------------------------------------------------------------

def _history(tmp_path: Path, nights: int = 4, step: float = 1.0) -> tuple[Path, list[Path]]:
    """A machine's history of `nights` results files; the newest one `step` times slower."""
    from tests.nightly.test_nightly import _conf, write_commit

    folder = tmp_path / "results" / "runner-1_nvidia-h100" / "perf-nightly"
    folder.mkdir(parents=True)
    paths = []
    for i in range(nights):
        series = {(v, s, m): [0.1 * (step if i == nights - 1 else 1.0) * (1 + 0.002 * k) for k in range(5)]
                  for v in VARIANTS for s in SCENARIOS for m in ("eager", "graph")}
        paths.append(write_commit(folder, f"{i:040x}", i + 1, series))
    return Path(_conf(tmp_path, tmp_path / "results")), paths


def _alert(conf: Path, tmp_path: Path, capsys, *extra: str) -> tuple[int, list[str], str]:
    return run_cli(["alert", "--config", str(conf), "--out", str(tmp_path / "out"), "--thresholds",
                    THRESHOLDS, *extra], capsys)


def test_a_corrupt_night_is_left_out_and_said_everywhere(tmp_path, capsys):
    conf, paths = _history(tmp_path, nights=4, step=1.5)
    paths[1].write_bytes(paths[1].read_bytes()[:100])  # a night cut short mid-header
    code, err, _ = _alert(conf, tmp_path, capsys)
    assert code == 1  # the alert at the newest night still stands
    assert [line for line in err if paths[1].name in line and line.startswith("warning: ")], err
    md = (tmp_path / "out" / "alert.md").read_text()
    assert paths[1].name in md and "left out of this history" in md
    doc = json.loads((tmp_path / "out" / "alert.json").read_text())
    assert doc["machines"][0]["commits"] == [f"{i:040x}" for i in (0, 2, 3)]


def test_a_night_of_another_gpu_is_left_out_and_refused_for_a_new_night(tmp_path, capsys, monkeypatch):
    from perf.nightly import _guard_history, asvrun

    conf, paths = _history(tmp_path, nights=4)
    rows = _lines(paths[2])
    rows[0]["environment"]["gpu"] = "NVIDIA A100"
    _rewrite(paths[2], rows)
    code, err, _ = _alert(conf, tmp_path, capsys)
    assert code == 0 and any("measured on NVIDIA A100" in line and paths[2].name in line for line in err)
    monkeypatch.setattr(results, "environment", lambda root=None: {**ENV, "gpu": "NVIDIA A100"})
    cfg = asvrun.read_config(str(conf))
    with pytest.raises(ConfigError, match="holds data measured with gpu 'NVIDIA H100 80GB HBM3'.*--force"):
        _guard_history(cfg, "runner-1_nvidia-h100", force=False)
    _guard_history(cfg, "runner-1_nvidia-h100", force=True)
    _guard_history(cfg, "another-machine", force=False)  # a new history: nothing to replace
    monkeypatch.setattr(results, "environment", lambda root=None: {**ENV, "interpreter": True})
    with pytest.raises(ConfigError, match="interpreter"):
        _guard_history(cfg, "runner-1_nvidia-h100", force=False)


def test_alert_without_any_verdict_is_nothing_measured(tmp_path, capsys):
    conf, paths = _history(tmp_path, nights=2)  # one earlier night: fewer than --min-history
    code, err, _ = _alert(conf, tmp_path, capsys)
    assert_one_line(code, err, "nothing was measured", "fewer than 2 earlier commits")
    assert_one_line(*_alert(conf, tmp_path, capsys, "--vendor", "intel")[:2], "--vendor intel")
    for p in paths:
        p.write_text("{}\n")
    code, err, _ = _alert(conf, tmp_path, capsys)
    assert_one_line(code, err, "no nightly history", paths[0].name)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_history_ends_in_a_result_or_one_line(tmp_path_factory, capsys, data):
    tmp = tmp_path_factory.mktemp("history")
    conf, paths = _history(tmp, nights=4, step=data.draw(st.sampled_from([1.0, 1.5])))
    night = data.draw(st.integers(0, len(paths) - 1))
    kind, mutant = data.draw(mutated(paths[night].read_bytes()))
    paths[night].write_bytes(mutant)
    code, err, _ = _alert(conf, tmp, capsys)
    assert code in (0, 1, 2), (kind, code, err)
    if code == 2:
        assert len(err) == 1 and err[0].startswith("error: "), (kind, err)
        return
    try:
        res = results.load(str(paths[night]), warn=False)
    except ConfigError:  # left out: said on stderr and in alert.md
        assert any(paths[night].name in line for line in err), (kind, err)
        assert paths[night].name in (tmp / "out" / "alert.md").read_text()
        return
    said = any(paths[night].name in line for line in err)
    assert len(res.measurements()) == _parseable_records(mutant) or said, (kind, err)


def test_fuzz_strategy_makes_every_mutation():
    """The strategy can draw each mutation (a guard against a strategy that silently narrows)."""
    seen = set()

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(st.data())
    def draw(data):
        seen.add(data.draw(mutated(_pristine()["results"]))[0])

    draw()
    assert seen == set(MUTATIONS)


def test_the_readers_raise_only_config_errors_on_random_bytes(tmp_path):
    """Below the commands: each reader turns any bytes into a result or a ConfigError."""
    from perf.latency.selftest import load_runs
    from perf.nightly.toolchain import load_summary

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
    def read(blob):
        for name, reader in (("r.jsonl", lambda p: results.load(p, warn=False)),
                             ("findings.json", load_findings), ("gate.json", ab.load_ledger),
                             ("runs.json", load_runs),
                             ("toolchain.json", lambda p: load_summary(os.path.dirname(p)))):
            path = tmp_path / name
            path.write_bytes(blob)
            with contextlib.suppress(ConfigError):
                reader(str(path))

    read()


def test_nothing_measured_is_a_config_error():
    assert issubclass(NothingMeasured, ConfigError) and NothingMeasured("x").exit_code == 2
