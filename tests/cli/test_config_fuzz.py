"""Fuzzing the configuration readers: thresholds.yaml,
perf/suites.yaml and calibration/nvidia.yaml, each mutated at the text level (so duplicate
keys, cut files and invalid UTF-8 are reachable) and at the parsed level (types, ranges,
NaN, swapped warn and fail, renamed and unknown keys).

Every mutated file either loads into a configuration that holds exactly what its text says
(no ratio, statistic, target, scenario or calibrated number silently changed, every warn <=
its fail) or is refused with a ConfigError of one line that names the file; any other
exception fails the test. The command line ends such a file in exit 2 and one line, no
traceback.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import os
import subprocess
import sys
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perf import scenarios
from perf.errors import ConfigError
from perf.scenarios import Scenario
from perf.thresholds import load_calibration, load_thresholds
from perf.vendor import TARGETS, VENDORS

pytestmark = pytest.mark.slow  # starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = {
    "thresholds": os.path.join(ROOT, "thresholds.yaml"),
    "suites": os.path.join(ROOT, "perf", "suites.yaml"),
    "calibration": os.path.join(ROOT, "calibration", "nvidia.yaml"),
}
TEXT = {kind: open(path, encoding="utf-8").read() for kind, path in SOURCES.items()}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
WORKDIR = tempfile.mkdtemp(prefix="config-fuzz-")


# --- mutations -----------------------------------------------------------------------------

def _key_lines(text: str) -> list[int]:
    """Indexes of the lines that hold a `key:` (not comments)."""
    out = []
    for i, line in enumerate(text.split("\n")):
        body = line.strip()
        if body and not body.startswith("#") and ":" in body:
            out.append(i)
    return out


def _block_end(lines: list[str], i: int) -> int:
    """The line after the block that starts on line i (a key or a list item and what is nested in it)."""
    indent = len(lines[i]) - len(lines[i].lstrip())
    item = lines[i].lstrip().startswith("- ")
    j = i + 1
    while j < len(lines):
        body = lines[j].strip()
        ind = len(lines[j]) - len(lines[j].lstrip())
        ends = ind < indent or (ind == indent and (not item or body.startswith("- ")))
        if body and not body.startswith("#") and ends:
            break
        j += 1
    return j


def _typo(key: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(0, max(0, len(key) - 1)))
    how = data.draw(st.sampled_from(["drop", "double", "swap", "change"]))
    if how == "drop" and len(key) > 1:
        return key[:i] + key[i + 1:]
    if how == "swap" and i + 1 < len(key):
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    if how == "change":
        return key[:i] + ("x" if key[i] != "x" else "y") + key[i + 1:]
    return key[:i] + key[i] + key[i:]


ODD_VALUES = ["abc", "-1", "0", ".nan", ".inf", "-.inf", "true", "false", "null", "[]", "{}", "1e308",
              "'1.05'", "1.0", "0.5", "100000000", "-0.0", "[1, 2]", "{a: 1}", "''", "1.5", "3", "sm_90",
              "cuda", "hip", "2"]


@st.composite
def text_mutation(draw, kind: str) -> tuple[str, bytes]:
    """(what was done, the mutated file's bytes) of one text-level mutation of a real file."""
    text = TEXT[kind]
    lines = text.split("\n")
    keys = _key_lines(text)
    how = draw(st.sampled_from(["delete line", "duplicate line", "value", "typo", "unknown key",
                                "duplicate block", "truncate", "invalid utf-8", "swap warn/fail"]))
    if how == "truncate":
        cut = draw(st.integers(0, len(text.encode()) - 1))
        return f"truncated at byte {cut}", text.encode()[:cut]
    if how == "invalid utf-8":
        at = draw(st.integers(0, len(text.encode())))
        byte = draw(st.sampled_from([b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80"]))
        raw = text.encode()
        return f"byte {byte!r} at {at}", raw[:at] + byte + raw[at:]
    if how == "swap warn/fail":
        pairs = [i for i in keys if lines[i].strip().startswith(("warn:", "registers_warn_ratio:"))
                 or "{warn:" in lines[i]]
        if pairs:
            i = draw(st.sampled_from(pairs))
            line = lines[i]
            if "{warn:" in line:  # floor: {warn: 1.005, fail: 1.01}
                head, _, rest = line.partition("{warn: ")
                w, _, rest = rest.partition(", fail: ")
                f, _, tail = rest.partition("}")
                lines[i] = f"{head}{{warn: {f}, fail: {w}}}{tail}"
            else:
                j = next((j for j in keys if j > i and "fail" in lines[j].split(":")[0]), None)
                if j is not None:
                    key_i, _, val_i = lines[i].partition(":")
                    key_j, _, val_j = lines[j].partition(":")
                    lines[i], lines[j] = f"{key_i}:{val_j}", f"{key_j}:{val_i}"
        return "warn and fail swapped", "\n".join(lines).encode()
    i = draw(st.sampled_from(keys))
    line = lines[i]
    indent = line[: len(line) - len(line.lstrip())]
    if how == "delete line":
        del lines[i]
    elif how == "duplicate line":
        lines.insert(i + 1, line)
    elif how == "value":
        key, _, _ = line.partition(":")
        lines[i] = f"{key}: {draw(st.sampled_from(ODD_VALUES))}"
    elif how == "typo":
        key, sep, rest = line.lstrip().removeprefix("- ").partition(":")
        prefix = line[: len(line) - len(line.lstrip().removeprefix("- "))]
        lines[i] = prefix + _typo(key, draw(st.data())) + sep + rest
    elif how == "unknown key":
        lines.insert(i, f"{indent}{'  ' if line.lstrip().startswith('- ') else ''}zz_unknown: 1")
    elif how == "duplicate block":
        end = _block_end(lines, i)
        lines[end:end] = lines[i:end]
    return f"{how} at line {i + 1}", "\n".join(lines).encode()


def _paths(node, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


ODD_OBJECTS = ["abc", "", -1, 0, 0.5, 1.0, 1.04, 2, 100000, 1e308, float("nan"), float("inf"), -float("inf"),
               True, False, None, [], {}, [1], {"a": 1}, "1.05", "nvidia", "sm_90", "static_grid"]


PARSED = {kind: yaml.safe_load(text) for kind, text in TEXT.items()}
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
LAX_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # for a text the strict reader accepted
PATHS = {kind: [p for p in _paths(doc) if p] for kind, doc in PARSED.items()}


@st.composite
def parsed_mutation(draw, kind: str) -> tuple[str, bytes]:
    """(what was done, the mutated file's bytes) of one mutation of the parsed document."""
    doc = copy.deepcopy(PARSED[kind])
    paths = PATHS[kind]
    path = draw(st.sampled_from(paths))
    parent, last = _at(doc, path[:-1]), path[-1]
    how = draw(st.sampled_from(["delete", "retype", "typo", "unknown key", "swap warn/fail", "copy sibling"]))
    if how == "delete":
        del parent[last]
    elif how == "retype":
        parent[last] = copy.deepcopy(draw(st.sampled_from(ODD_OBJECTS)))
    elif how == "typo" and isinstance(parent, dict):
        parent[_typo(str(last), draw(st.data()))] = parent.pop(last)
    elif how == "unknown key" and isinstance(parent, dict):
        parent["zz_unknown"] = 1
    elif how == "swap warn/fail":
        pairs = [p for p in paths if isinstance(_at(doc, p), dict) and {"warn", "fail"} <= set(_at(doc, p))]
        if pairs:
            m = _at(doc, draw(st.sampled_from(pairs)))
            m["warn"], m["fail"] = m["fail"], m["warn"]
    elif how == "copy sibling" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))  # a second target, case or scenario like this one
    return f"{how} {'.'.join(map(str, path))}", yaml.dump(doc, Dumper=DUMPER, sort_keys=False).encode()


# --- what a load must give -----------------------------------------------------------------

LOADERS = {
    "thresholds": load_thresholds,
    "suites": scenarios.load_suites,
    "calibration": load_calibration,
}
_count = iter(range(10 ** 9))


def _write(kind: str, raw: bytes) -> str:
    path = os.path.join(WORKDIR, f"{kind}-{next(_count)}.yaml")
    with open(path, "wb") as f:
        f.write(raw)
    return path


def _same(a, b) -> bool:
    """Equal, and of the same kind of number (True is not 1 here)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _thresholds_hold_the_text(th, doc: dict) -> None:
    assert set(th.vendors) == {k for k in doc if k in VENDORS}
    for name, vt in th.vendors.items():
        v = doc[name]
        lat = v["latency"]
        assert (vt.latency.warn, vt.latency.fail) == (lat["warn"], lat["fail"])
        assert 1.0 < vt.latency.warn <= vt.latency.fail
        if "floor" in lat:
            rule = vt.noise_rule
            assert (rule.floor_warn, rule.floor_fail, rule.k_warn, rule.k_fail) == (
                lat["floor"]["warn"], lat["floor"]["fail"], lat["k"]["warn"], lat["k"]["fail"])
            assert rule.floor_warn <= rule.floor_fail <= vt.latency.fail and rule.k_warn <= rule.k_fail
        else:
            assert vt.noise_rule is None
        for key, value in (v["statistics"] or {}).items():
            assert _same(getattr(vt.statistics, key), value), key
        for key, value in (v["compile"]["static"] or {}).items():
            assert _same(vt.static[key], value), key
        if vt.static["registers_fail_ratio"] is not None:
            assert vt.static["registers_warn_ratio"] <= vt.static["registers_fail_ratio"]
        targets = v["compile"]["targets"]
        assert [t.name for t in vt.targets] == [t["name"] for t in targets]
        for t, want in zip(vt.targets, targets):
            assert t.backend == VENDORS[name].backend
            for key, value in want.items():
                got = getattr(t, key)
                assert (list(got) if isinstance(got, tuple) else got) == value, key
            for key in ("arch", "warp_size", "max_shared_memory_bytes", "max_registers_per_thread"):
                if key not in want:  # what the text leaves out is the target's record's (perf/vendor.py)
                    assert getattr(t, key) == getattr(TARGETS[t.name], key), key
        assert list(vt.runners.labels) == v["runners"]["labels"]
    names = [t.name for vt in th.vendors.values() for t in vt.targets]
    assert len(names) == len(set(names))
    for o, want in zip(th.overrides, doc.get("overrides") or [], strict=True):
        assert (o.warn, o.fail) == (want["latency"].get("warn"), want["latency"].get("fail"))
        globs = ("variant", "scenario", "metric")
        assert (o.variant, o.scenario, o.metric) == tuple(want.get(k, "*") for k in globs)


def _suites_hold_the_text(suites: dict, doc: dict) -> None:
    assert list(suites) == list(doc)
    for name, body in doc.items():
        got = suites[name]
        assert got and len({s.name for s in got}) == len(got)
        assert all(Scenario.parse(s.name) == s for s in got)  # every scenario is what its name says
        names = {s.name for s in got}
        for item in body.get("scenarios") or []:
            assert scenarios.canonical_name(item) in names
        for grid in body.get("grids") or []:
            for axis, values in grid.items():
                for value in values if isinstance(values, list) else [values]:
                    field = scenarios._AXES[axis]
                    assert any(_same(getattr(s, field), value) for s in got), (name, axis, value)


def _calibration_holds_the_text(cal, doc: dict) -> None:
    assert (cal.vendor, cal.gpu) == (doc["vendor"], doc["gpu"])
    assert len(cal.cases) == len(doc["cases"])
    for c in doc["cases"]:
        got = cal.case(c["variant"], scenarios.canonical_name(c["scenario"]), c["metric"])
        for key in ("sigma_round", "tau", "processes", "rounds", "median_ms"):
            assert _same(getattr(got, key), c[key]) and math.isfinite(getattr(got, key)), key
    assert cal.launch_cost == doc.get("launch_cost")


HOLDS = {"thresholds": _thresholds_hold_the_text, "suites": _suites_hold_the_text,
         "calibration": _calibration_holds_the_text}


def _check(kind: str, what: str, raw: bytes) -> None:
    """The property: a load that holds exactly what the text says, or one ConfigError line
    naming the file; anything else (another exception type) fails the test."""
    path = _write(kind, raw)
    try:
        loaded = LOADERS[kind](path)
    except ConfigError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(f"{path}: "), (what, msg)
        return
    finally:
        os.remove(path)
    doc = yaml.load(raw.decode("utf-8"), Loader=LAX_LOADER)  # noqa: S506 (a safe loader); no duplicate keys:
    HOLDS[kind](loaded, doc)  # the strict reader loaded it


@pytest.mark.parametrize("kind", list(SOURCES))
def test_the_real_files_hold_what_their_text_says(kind):
    _check(kind, "unchanged", TEXT[kind].encode())


@pytest.mark.parametrize("mutation", [text_mutation, parsed_mutation], ids=["text", "parsed"])
@pytest.mark.parametrize("kind", list(SOURCES))
@SETTINGS
@given(data=st.data())
def test_a_mutated_file_loads_exactly_or_ends_in_one_line(kind, mutation, data):
    what, raw = data.draw(mutation(kind))
    _check(kind, what, raw)


# --- hand-picked bad inputs, each refused ---------------------------------------------------

def _nvidia_block() -> str:
    text = TEXT["thresholds"]
    return text[text.index("\nnvidia:\n"): text.index("\namd:\n")]


def _sm90_target() -> str:
    text = TEXT["thresholds"]
    start = text.index("      - name: sm_90")
    return text[start: text.index("      - name: sm_100")]


ISSUE_EXAMPLES = {  # name -> (thresholds text, what the one line says)
    "a second fail: wins": (
        TEXT["thresholds"].replace("    fail: 1.05\n", "    fail: 1.05\n    fail: 50.0\n", 1),
        "key 'fail' is given twice"),
    "a second nvidia: section": (TEXT["thresholds"] + _nvidia_block().replace("fail: 1.05", "fail: 50.0"),
                                 "key 'nvidia' is given twice"),
    "two targets named sm_90": (TEXT["thresholds"].replace(_sm90_target(), _sm90_target() * 2, 1),
                                "target 'sm_90' is already listed"),
    "an override naming statc_grid": (TEXT["thresholds"].replace(
        "overrides: []", "overrides:\n  - {variant: statc_grid, latency: {fail: 1.1}, reason: r}"),
        "'statc_grid' matches no registered variant"),
    "an override naming graf": (TEXT["thresholds"].replace(
        "overrides: []", "overrides:\n  - {metric: graf, latency: {fail: 1.1}, reason: r}"),
        "'graf' matches no metric"),
    "registers warn above fail": (
        TEXT["thresholds"].replace("registers_warn_ratio: 1.10", "registers_warn_ratio: 1.30", 1),
        "registers_fail_ratio 1.25 is below"),
    "an invalid UTF-8 byte": (TEXT["thresholds"].replace("# H100", "# H\udcff100", 1), "not UTF-8"),
}


@pytest.mark.parametrize("name", list(ISSUE_EXAMPLES))
def test_the_command_line_ends_a_bad_thresholds_file_in_one_line(name, capsys):
    from perf import cli

    text, says = ISSUE_EXAMPLES[name]
    path = _write("thresholds", text.encode("utf-8", "surrogateescape"))
    assert cli.main(["workflows", "--thresholds", path, "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path in err[0] and says in err[0], err


@SETTINGS
@given(data=st.data())
def test_the_command_line_never_passes_a_mutated_thresholds_file_it_cannot_read(data):
    """A mutated file the reader refuses ends the command in exit 2 and one line; one it
    reads is judged like the real file (the workflows it generates are then compared)."""
    from perf import cli

    _, raw = data.draw(st.one_of(text_mutation("thresholds"), parsed_mutation("thresholds")))
    path = _write("thresholds", raw)
    try:
        load_thresholds(path)
        readable = True
    except ConfigError:
        readable = False
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["workflows", "--thresholds", path, "--check", "--root", ROOT])
    err = stderr.getvalue()
    assert "Traceback" not in err
    if not readable:
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and path in lines[0], err
    else:
        assert rc in (0, 1), err


def test_a_subprocess_exits_2_without_a_traceback():
    text, says = ISSUE_EXAMPLES["a second fail: wins"]
    path = _write("thresholds", text.encode())
    out = subprocess.run([sys.executable, "-m", "perf", "workflows", "--thresholds", path, "--check"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and path in lines[0], out.stderr
