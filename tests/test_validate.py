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
