"""The one rule for names that become paths or keys (perf/names.py), and the bounded schemas of
the data files (perf/schema.py), proved by properties: a random name never leaves its folder and
is accepted or refused alike by every reader and writer of its kind; a random number is data only
within its bounds; a record given twice is refused."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from perf import cli, names, results, schema, validate, verdicts
from perf.change import plan
from perf.errors import ConfigError
from perf.nightly import heartbeat, store

SCENARIO = "llama3-8b/decode/batch2-kv64/block16"
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# names as a mistake or an attack makes them: traversal, separators, unicode, control characters
PIECES = st.sampled_from(["", ".", "..", "/", "../", "a", "Z9", "-", "_", ".x", "x.", "é", "☃", "\n", "\x00",
                          " ", "\\", "peer:", ":", "static_grid", "llama3-8b", "2026-11-20", "~", "$HOME"])
NAMES = st.one_of(st.text(max_size=12), st.lists(PIECES, max_size=6).map("".join),
                  st.from_regex(names.SEGMENT, fullmatch=True))


def _makeable(name: str) -> bool:
    """Whether a folder of that name can be made (to walk it as the store does)."""
    return bool(name) and "/" not in name and "\x00" not in name and name not in (".", "..") \
        and len(name.encode("utf-8", "surrogatepass")) < 200


def _refused(fn, *args) -> bool:
    try:
        fn(*args)
    except ConfigError as e:
        assert "\n" not in str(e), str(e)  # one line, whatever the name holds
        return True
    return False


def _header(**extra) -> dict:
    env = {"vendor": "nvidia", "gpu": "NVIDIA H100 80GB HBM3", "interpreter": False, "commit": "0" * 40,
           "time": "2026-11-20T03:00:00+00:00"}
    return {"kind": "header", "schema_version": 1, "suite": "smoke", "metrics": ["eager"], "samples": 3,
            "environment": env, **extra}


def _record(variant="static_grid", scenario=SCENARIO, median=1.0, repeat=0) -> dict:
    return {"kind": "record", "variant": variant, "scenario": scenario, "metric": "eager", "repeat": repeat,
            "samples": [1.0, 1.0, 1.0], "clock": "device", "median": median, "p20": 1.0, "p80": 1.0,
            "config": [], "batch_digest": "x", "commit": "0" * 40}


def _finding(**change) -> dict:
    f = {"gate": "latency", "vendor": "nvidia", "target": "NVIDIA H100", "variant": "static_grid",
         "scenario": SCENARIO, "metric": "eager", "base": 1.0, "head": 1.01, "ratio": 1.01, "ci_low": 0.99,
         "ci_high": 1.03, "p_value": 0.3, "threshold": "warn > 1.03, fail > 1.05", "verdict": "ok",
         "note": "", "min_detectable": 1.04}
    return {**f, **change}


def _write(path, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def _results(tmp, *rows) -> str:
    return _write(tmp / "r.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def _findings(tmp, *found) -> str:
    return _write(tmp / "findings.json", json.dumps({"kind": "findings", "schema_version": 2,
                                                     "findings": list(found)}))


def _plan(tmp, variant: str, scenario: str) -> str:
    doc = plan.document(plan.LATENCY, [{"variant": variant, "scenario": scenario, "why": "x"}],
                        vendor="nvidia", target="sm_90", base="a" * 40, head="b" * 40)
    return _write(tmp / "plan.json", json.dumps(doc))


# --- names: one rule, every reader and writer of a kind -------------------------------------------

@SETTINGS
@given(name=NAMES)
def test_a_runner_name_never_leaves_the_store_and_every_reader_agrees(tmp_path_factory, name):
    tmp = tmp_path_factory.mktemp("runner")
    accepted = not _refused(names.runner, name, "--machine")
    assert accepted == bool(names.SEGMENT.fullmatch(name))
    assert accepted == (not _refused(store.check_name, name))
    assert accepted == (not _refused(validate.path_names, argparse.Namespace(machine=name)))
    assert accepted == (not _refused(store.night_dir, str(tmp), name, "2026-11-20"))
    if accepted:
        path = os.path.realpath(store.night_dir(str(tmp), name, "2026-11-20"))
        assert path.startswith(os.path.realpath(tmp / store.NIGHTS) + os.sep)
    # the store's folder walk: the same rule for a folder found on disk (hidden ones: an interrupted save)
    if _makeable(name):
        (tmp / store.NIGHTS / name).mkdir(parents=True)
        if name.startswith("."):
            assert store.runners(str(tmp)) == []
        else:
            assert accepted == (not _refused(store.runners, str(tmp)))


@SETTINGS
@given(name=NAMES)
def test_a_branch_is_refused_alike_by_the_rule_and_the_command_line(name):
    by_rule = _refused(names.branch, name, "--branch")
    assert by_rule == _refused(validate.path_names, argparse.Namespace(branch=name))
    if not _refused(names.branch, name, "--branch"):
        assert ".." not in name and not name.startswith("/") and "" not in name.split("/")


@SETTINGS
@given(name=NAMES)
def test_a_results_header_names_its_machine_and_commit_by_the_same_rule(tmp_path_factory, name):
    """The machine a results header names becomes the night's folder (store.tonight), its commit
    the name of asv's result files: refused by the reader exactly where the rule refuses them."""
    tmp = tmp_path_factory.mktemp("header")
    machine = _header(nightly={"machine": name, "commit": "0" * 40})
    assert _refused(results.load, _results(tmp, machine, _record())) == _refused(names.runner, name, "m")
    env = _header()
    env["environment"] = {**env["environment"], "commit": name}
    record = {**_record(), "commit": name}
    assert _refused(results.load, _results(tmp, env, record)) == _refused(names.commit, name, "c")


DATES = st.one_of(NAMES, st.dates(min_value=dt.date(1900, 1, 1)).map(dt.date.isoformat),
                  st.tuples(st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99))
                  .map(lambda t: f"{t[0]:04d}-{t[1]:02d}-{t[2]:02d}"))


@SETTINGS
@given(date=DATES)
def test_a_date_is_a_real_day_not_to_come_for_every_reader(tmp_path_factory, date):
    tmp = tmp_path_factory.mktemp("date")
    today = dt.datetime.now(dt.timezone.utc).date()
    try:
        real = dt.date.fromisoformat(date) <= today + names.SLACK and re.fullmatch(r"\d{4}-\d\d-\d\d", date)
    except ValueError:
        real = False
    assert (not _refused(names.date, date, "--date")) == bool(real)
    assert (not _refused(validate.path_names, argparse.Namespace(date=date))) == bool(real)
    assert (not _refused(store.night_dir, str(tmp), "m", date)) == bool(real)
    if _makeable(date) and not date.startswith("."):
        night = tmp / store.NIGHTS / "m" / date
        night.mkdir(parents=True)
        (night / store.RESULTS).write_text("")
        assert (not _refused(store.nights, str(tmp))) == bool(real)


@SETTINGS
@given(variant=NAMES, scenario=st.one_of(NAMES, st.just(SCENARIO), st.lists(NAMES, min_size=4, max_size=5)
                                         .map("/".join)))
def test_variants_and_scenarios_are_refused_alike_by_results_findings_and_plans(tmp_path_factory, variant,
                                                                                  scenario):
    tmp = tmp_path_factory.mktemp("keys")
    assume(variant != schema.ALL and scenario != schema.ALL)
    by_results = _refused(results.load, _results(tmp, _header(), _record(variant, scenario)))
    by_skip = _refused(results.load, _results(tmp, _header(), {"kind": "skip", "variant": variant,
                                                                "scenario": scenario, "reason": "r"}))
    finding = _finding(variant=variant, scenario=scenario)
    by_findings = _refused(verdicts.load_findings, _findings(tmp, finding))
    by_plan = _refused(plan.read_plan, _plan(tmp, variant, scenario), plan.LATENCY)
    assert by_results == by_skip == by_findings == by_plan
    if not by_results:  # accepted: by the rule, and a scenario of the grammar
        assert names.SEGMENT.fullmatch(variant.removeprefix(names.PEER))
        assert all(names.SEGMENT.fullmatch(p) for p in scenario.split("/"))


def test_the_peer_prefix_is_the_peers_own():
    from perf import peers

    assert names.PEER == peers.PREFIX


def test_a_variant_the_results_header_does_not_list_is_refused(tmp_path):
    path = _results(tmp_path, _header(variants=["naive"], peers=["sdpa_flash"]), _record("static_grid"))
    with pytest.raises(ConfigError, match="line 2: variant 'static_grid': no such variant"):
        results.load(path)
    ok = _results(tmp_path, _header(variants=["naive"], peers=["sdpa_flash"]), _record("peer:sdpa_flash"))
    assert results.load(ok).measurements()[0]["variant"] == "peer:sdpa_flash"


def test_a_scenario_the_results_header_does_not_list_is_refused(tmp_path):
    path = _results(tmp_path, _header(scenarios={SCENARIO: "d"}), _record(scenario="x/y/z/w"))
    with pytest.raises(ConfigError, match="line 2: scenario 'x/y/z/w': no such scenario"):
        results.load(path)


# --- numbers: data only within their bounds -------------------------------------------------------

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**400, 10**400),
                    st.sampled_from([0, -3, 1e308, -0.0, 1e-9, 3.6e6 + 1, 5e-324]))


@SETTINGS
@given(field=st.sampled_from(["base", "head", "ratio", "ci_low", "ci_high", "min_detectable", "p_value"]),
       value=NUMBERS)
def test_a_findings_number_out_of_bounds_is_refused_never_ok(tmp_path_factory, capsys, field, value):
    tmp = tmp_path_factory.mktemp("finding")
    change = {field: value}
    if field in ("ci_low", "ci_high"):
        change = {"ci_low": value, "ci_high": value}
    try:
        text = json.dumps({"kind": "findings", "schema_version": 2, "findings": [_finding(**change)]})
    except (OverflowError, ValueError):
        return
    path = _write(tmp / "findings.json", text)
    bounds = {"base": schema.LATENCY_MS, "head": schema.LATENCY_MS, "p_value": schema.P_VALUE}.get(field,
                                                                                                   schema.RATIO)
    inside = schema.within(value, bounds)
    assert _refused(verdicts.load_findings, path) == (not inside)
    code = cli.main(["report", path])
    out, err = capsys.readouterr()
    if not inside:  # never rendered, never a pass
        assert code == 2 and len(err.strip().splitlines()) == 1 and field[:3] in err, err
        assert "ok" not in out.lower().split()


@SETTINGS
@given(value=NUMBERS, static=st.booleans())
def test_a_results_median_out_of_bounds_is_refused(tmp_path_factory, value, static):
    tmp = tmp_path_factory.mktemp("median")
    header = _header(gate="static") if static else _header()
    try:
        path = _results(tmp, header, _record(median=value))
    except (OverflowError, ValueError):
        return
    bounds = schema.SECONDS if static else schema.LATENCY_MS
    assert _refused(results.load, path) == (not schema.within(value, bounds))


def test_json_nan_and_infinity_are_no_numbers(tmp_path):
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        line = json.dumps(_record()).replace('"median": 1.0', f'"median": {literal}')
        path = _write(tmp_path / "r.jsonl", json.dumps(_header()) + "\n" + line + "\n")
        with pytest.raises(ConfigError, match="median"):
            results.load(path)
        doc = json.dumps({"kind": "findings", "findings": [_finding()]}).replace('"ratio": 1.01',
                                                                                 f'"ratio": {literal}')
        with pytest.raises(ConfigError, match="ratio"):
            verdicts.load_findings(_write(tmp_path / "f.json", doc))
    assert not math.isfinite(float("nan"))


# --- records given twice ---------------------------------------------------------------------------

@SETTINGS
@given(copies=st.integers(2, 4), others=st.integers(0, 3))
def test_a_record_given_twice_is_refused_not_counted_twice(tmp_path_factory, copies, others):
    tmp = tmp_path_factory.mktemp("twice")
    rows = [_record(repeat=r + 1) for r in range(others)] + [_record()] * copies
    with pytest.raises(ConfigError, match="repeats the measurement"):
        results.load(_results(tmp, _header(), *rows))
    found = [_finding(metric=f"m{i}") for i in range(others)] + [_finding()] * copies
    with pytest.raises(ConfigError, match=r"findings\[\d\] repeats the case"):
        verdicts.load_findings(_findings(tmp, *found))


# --- the heartbeat: a night's time is read, never guessed from its folder -----------------------------

def test_the_heartbeat_refuses_a_night_to_come_or_unreadable(tmp_path):
    from tests.nightly.test_nightly_store import results_file

    data = tmp_path / "data"
    now = dt.datetime(2026, 11, 28, 12, tzinfo=dt.timezone.utc)
    src = results_file(tmp_path / "r.jsonl", "m", "a" * 40, day="2026-11-20")
    store.write_night(str(data), "m", "2026-11-20", src, None, None)
    assert heartbeat.beats(str(data), now)[0].silent  # 8 days old
    night = data / store.NIGHTS / "m" / "2026-11-20" / store.RESULTS
    text = night.read_text()
    night.write_text(text.replace("2026-11-20T03:00:00", "2099-11-20T03:00:00"))
    with pytest.raises(ConfigError, match="environment.time '2099-11-20"):
        heartbeat.beats(str(data), now)
    assert '"median": 1.0' in text
    night.write_text(text.replace('"median": 1.0', '"median": NaN'))
    with pytest.raises(ConfigError, match="median"):
        heartbeat.beats(str(data), now)
