"""Vendor libraries as cases of a measured side: "peer:<name>" beside the variants.

perf/peers.py knows the libraries (which exist, how each is set up on a batch); this module
turns one into a `perf.measure.cases.Case` of a `perf.measure.rounds.Side`: `attach` makes
the peers' cases for a scenario (setup, including each library's own planning, outside the
timed region; a first untimed call), `detach` drops them. `perf run --peers` and the
nightly both go through `perf.peers.resolve` (auto | none | a,b) and `attach`.
"""

from __future__ import annotations

from perf.measure.cases import Case
from perf.peers import PREFIX, PeerUnavailable, setup_for_batch


def make_case(name: str, scenario, device: str, batch=None) -> Case:
    """A Case for peer `name` on `scenario`: set up, called once (library initialization,
    autotuning, lazy loading: not timed), or skipped with the reason."""
    spec = scenario.spec()
    case_name = PREFIX + name
    try:
        fn, label, note = setup_for_batch(name, spec, device, batch)
        fn()
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except PeerUnavailable as e:
        return Case(case_name, scenario.name, spec.digest(), None, skip=str(e))
    except Exception as e:  # a library that breaks is a finding, not a crash of the run
        return Case(case_name, scenario.name, spec.digest(), None,
                    skip=f"{type(e).__name__}: {e}".splitlines()[0][:300], kind="error")
    return Case(case_name, scenario.name, spec.digest(), fn,
                config=[{"peer": name, "label": label, "layout": note}])


def attach(side, scenario, names, cases: list) -> list:
    """Add the peers' cases for `scenario` to `side` (a perf.measure.rounds.Side whose
    variants were just prepared as `cases`), record their skips; returns them."""
    batch = next((c.keep[0] for c in cases if c.keep), None)  # the variants' batch, shared
    added = []
    for name in names:
        case = make_case(name, scenario, side.device, batch)
        side.cases[(case.variant, scenario.name)] = case
        if case.skip is not None and side.writer is not None:
            side.writer.skip(variant=case.variant, scenario=scenario.name, reason=case.skip, kind=case.kind)
        added.append(case)
    return added


def detach(side, scenario, names) -> None:
    for name in names:
        side.cases.pop((PREFIX + name, scenario.name), None)
