"""One validation of what a command is asked for: unknown names end in one line, never in a
gate that checked nothing."""

from __future__ import annotations

import pytest

from perf import validate
from perf.errors import ConfigError

REGISTERED = ("naive", "qblock", "static_grid")


def test_variants_default_to_every_registered_one():
    assert validate.variants(None, REGISTERED) == list(REGISTERED)
    assert validate.variants(" qblock , naive", REGISTERED) == ["qblock", "naive"]


@pytest.mark.parametrize("wanted", ["nave", "qblock,bogus", ","])
def test_unknown_variants_are_refused_naming_the_registered_ones(wanted):
    with pytest.raises(ConfigError, match=r"--variants .*registered: naive, qblock, static_grid"):
        validate.variants(wanted, REGISTERED)


def test_unknown_suite_and_globs_matching_nothing_are_refused():
    with pytest.raises(ConfigError, match="no suite 'bogus'.*--suite"):
        validate.scenarios("bogus", None)
    with pytest.raises(ConfigError, match="--scenarios 'nothing\\*' matches no scenario"):
        validate.scenarios("pr", "nothing*")
    assert len(validate.scenarios("smoke", None)) == 3


def test_metrics_and_scenarios_named_exactly():
    assert validate.metrics(None) == ["eager", "graph"] and validate.metrics("graph") == ["graph"]
    with pytest.raises(ConfigError, match="--metric graf: unknown metric graf; use eager or graph"):
        validate.metrics("graf", "--metric")
    suite, scenario = validate.scenario_named("llama3-8b/decode/batch1-kv128/block16", None)
    assert suite == "pr" and scenario.name == "llama3-8b/decode/batch1-kv128/block16"
    # the first suite that lists it
    assert validate.scenario_named("tiny/decode/batch1-kv16/block16", None)[0] == "smoke"
    with pytest.raises(ConfigError, match="not in suite smoke"):
        validate.scenario_named("llama3-8b/decode/batch1-kv128/block16", "smoke")
    with pytest.raises(ConfigError, match="not in any suite"):
        validate.scenario_named("llama3-8b/decode/batch1-kv12*", None)  # a glob is not a name
