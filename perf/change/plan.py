"""The change plan's one document: which cases of a consumer can differ between base and head.

Both consumers write and read the same document, told apart by `kind`:

- "latency": the latency gate's cases (variant, scenario) to time (`measure`), written as
  `plan.json` by `perf gate --plan-only` (or by the gate itself into its --out), read back by
  `perf gate --plan FILE` (perf/change/latency.py);
- "grid": the correctness grid's keyed cases (pytest node ids) to run (`run`), written as
  `grid-plan.json` by `perf grid --cases` (perf/change/grid.py), read by `pytest --grid-plan FILE`
  and `perf grid --compile-cache --grid-plan FILE` (perf/change/grid_plan.py).

Fields (schema 2): `schema`, `kind`, `vendor`, `target` (the compile target planned for, or the
GPU's architecture where none is), the grid's `arch` and `num_sms` (the GPU pytest checks the plan
against), `base` and `head` (commits), the kind's list of cases that can differ (`measure` |
`run`: each case's fields and `why`, the first difference in words), `unchanged` (each case's
fields: identical launches on both sides) and `counts` of both lists. A plan of schema 1 (the two
files of before) is refused with the line that says how to write it again.

pytest loads this module (perf/ci/grid.py IMPORTED): it imports nothing but the files it names.
"""

from __future__ import annotations

import dataclasses
import os

from perf import files
from perf.errors import ConfigError

SCHEMA = 2
LATENCY, GRID = "latency", "grid"
IDENTICAL = "identical launches"  # the note of every unchanged case


@dataclasses.dataclass(frozen=True)
class Kind:
    """What a consumer's plan holds: its file, the list of the cases that can differ (`act`), the
    fields that name a case (`case`, the first one containing `marker`), whether it names the
    runner's architecture and SM/CU count (`runner`), its one-line summary and its fix."""

    file: str
    act: str
    case: tuple[str, ...]
    what: str  # the plan, in a reader's message
    fix: str
    line: str  # the summary: {n} cases to act on, {same} unchanged, {total}
    runner: bool = False
    marker: str = ""
    case_about: str = ""


KINDS = {
    LATENCY: Kind("plan.json", "measure", ("variant", "scenario"), "a change plan",
                  "write it again with `python -m perf gate --plan-only --out DIR`, or drop --plan",
                  "{n} of {total} cases to time; {same} unchanged (" + IDENTICAL + ")"),
    GRID: Kind("grid-plan.json", "run", ("node",), "a grid plan",
               "write it again with `python -m perf grid --cases --vendor V --out DIR`, or drop --grid-plan",
               "grid: {n} of {total} keyed cases to run; {same} unchanged (" + IDENTICAL + "); the other "
               "grid tests run whole", runner=True, marker="::",
               case_about="a pytest node id (FILE::TEST[ID])"),
}


def document(kind: str, rows: list[dict], *, vendor: str, target: str, base: str, head: str,
             arch: str | None = None, num_sms: int | None = None) -> dict:
    """The plan of `rows`, each a case's fields and `why` (None: unchanged), in their order;
    `arch` and `num_sms` for a kind that names its runner."""
    k = KINDS[kind]
    act = [{**{f: r[f] for f in k.case}, "why": r["why"]} for r in rows if r["why"] is not None]
    same = [{f: r[f] for f in k.case} for r in rows if r["why"] is None]
    runner = {"arch": arch, "num_sms": num_sms} if k.runner else {}
    return {"schema": SCHEMA, "kind": kind, "vendor": vendor, "target": target, **runner, "base": base,
            "head": head, k.act: act, "unchanged": same, "counts": {k.act: len(act), "unchanged": len(same)}}


def summary(doc: dict) -> str:
    """The one line the command that made the plan prints."""
    k = KINDS[doc["kind"]]
    n, same = doc["counts"][k.act], doc["counts"]["unchanged"]
    return k.line.format(n=n, same=same, total=n + same)


def cases(doc: dict, key: str) -> list[tuple]:
    """The cases of the plan's list `key`, each as a tuple of its kind's fields."""
    fields = KINDS[doc["kind"]].case
    return [tuple(r[f] for f in fields) for r in doc[key]]


def write_plan(out_dir: str, doc: dict) -> str:
    """The plan into `out_dir`, under its kind's file name; its path."""
    os.makedirs(out_dir, exist_ok=True)
    return files.write_json(os.path.join(out_dir, KINDS[doc["kind"]].file), doc)


def read_plan(path: str, kind: str) -> dict:
    """A plan of `kind`, every field checked (ConfigError naming the file and the field)."""
    k = KINDS[kind]
    doc = files.load_json(path, k.what, k.fix, expect=dict)

    def bad(what: str) -> ConfigError:
        return ConfigError(f"{path}: {what}; {k.fix}")

    if doc.get("schema") != SCHEMA:
        raise bad(f"schema {doc.get('schema')!r:.20}, expected {SCHEMA}")
    if doc.get("kind") != kind:
        raise bad(f"`kind` {doc.get('kind')!r:.20}, expected {kind!r}")
    for key in ("vendor", "target", *(("arch",) if k.runner else ()), "base", "head"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise bad(f"`{key}` is not a non-empty text")
    if k.runner and (type(doc.get("num_sms")) is not int or doc["num_sms"] < 1):
        raise bad("`num_sms` is not a positive integer")
    for key, fields in ((k.act, (*k.case, "why")), ("unchanged", k.case)):
        _check_rows(doc.get(key), key, fields, k, bad)
        if kind == LATENCY:  # a case naming no variant or scenario is refused, never dropped
            from perf import schema

            for i, row in enumerate(doc[key]):
                try:
                    schema.check_names(path, f"{key}[{i}]", row)
                except ConfigError as e:
                    raise ConfigError(f"{e}; {k.fix}") from None
    if doc.get("counts") != {k.act: len(doc[k.act]), "unchanged": len(doc["unchanged"])}:
        raise bad(f"`counts` {str(doc.get('counts'))[:60]} does not count its {k.act} and unchanged lists")
    both = set(cases(doc, k.act)) & set(cases(doc, "unchanged"))
    if both:
        raise bad(f"case {' '.join(sorted(both)[0])} is both to {k.act} and unchanged")
    return doc


def _check_rows(rows, key: str, fields: tuple[str, ...], k: Kind, bad) -> None:
    """A list of cases, each an object of text `fields`, none twice."""
    if not isinstance(rows, list):
        raise bad(f"`{key}` is not a list")
    for i, row in enumerate(rows):
        if not (isinstance(row, dict) and all(isinstance(row.get(f), str) for f in fields)):
            raise bad(f"{key}[{i}] needs text fields {', '.join(fields)}")
        if k.marker not in row[k.case[0]]:
            raise bad(f"{key}[{i}] is not {k.case_about}")
    named = [tuple(r[f] for f in k.case) for r in rows]
    if len(set(named)) != len(named):
        raise bad(f"`{key}` names a case twice")

