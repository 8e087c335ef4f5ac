"""Vendor libraries as cases of a measured side: "peer:<name>" beside the variants.

perf/peers.py knows the libraries (which exist, how each is set up on a batch); this module
turns one into a `perf.measure.cases.Case` of a `perf.measure.rounds.Side`: `attach` makes
the peers' cases for a scenario (setup, including each library's own planning, outside the
timed region; a first untimed call), `detach` drops them. `perf run --peers` and the
nightly both go through `perf.peers.resolve` (auto | none | a,b) and `attach`.

The first call's output is checked against the fp32 reference on the same batch (the
variants' tolerances, perf/measure/check.py; the fp8 products' for a peer that rounds q and P to
e4m3 over an e4m3 cache, `Peer.e4m3_products`): a peer whose output is wrong is recorded as
an error with the max error and never timed, so it drops out of every table. Dense peers
(copies of other tensors) say in their layout note that their output is not checked.
"""

from __future__ import annotations

from perf import roofline
from perf.measure import check
from perf.measure.cases import Case, reference_for
from perf.peers import PEERS, PREFIX, PeerUnavailable, setup_for_batch


def make_case(name: str, scenario, device: str, batch=None, expected=None) -> Case:
    """A Case for peer `name` on `scenario`: set up, called once (library initialization,
    autotuning, lazy loading: not timed) and its output checked (`expected`: the reference outputs
    for `batch`, `check.Reference`, computed here when not given: a peer is held to the reference
    of q itself), or skipped with the reason."""
    spec = scenario.spec()
    case_name = PREFIX + name
    try:
        fn, label, note = setup_for_batch(name, spec, device, batch)
        result = fn()
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if PEERS[name].checked:
            if expected is None:
                from kernels.batch import build_batch

                expected = reference_for(batch if batch is not None else build_batch(spec, device))
            exact = expected.exact
            products = PEERS[name].e4m3_products and spec.fp8_kv
            found = check.compare(result, exact, *(check.FP8_PRODUCTS_TOLERANCE if products
                                                   else check.tolerance(exact.dtype))) \
                if isinstance(result, torch.Tensor) else None
            if found is None or not found.ok:
                why = (check.wrong_reason(found, "before timing") if found is not None else
                       f"{check.WRONG} before timing: the call returned no output in the kernels' layout")
                return Case(case_name, scenario.name, spec.digest(), None, skip=why + ": not timed",
                            kind="error")
        else:
            note = f"{note}; output not checked" if note else "output not checked"
    except PeerUnavailable as e:
        return Case(case_name, scenario.name, spec.digest(), None, skip=str(e))
    except Exception as e:  # a library that breaks is a finding, not a crash of the run
        return Case(case_name, scenario.name, spec.digest(), None,
                    skip=f"{type(e).__name__}: {e}".splitlines()[0][:300], kind="error")
    return Case(case_name, scenario.name, spec.digest(), fn,
                config=[{"peer": name, "label": label, "layout": note}],
                work=roofline.work(getattr(batch, "spec", spec)))


def attach(side, scenario, names, cases: list) -> list:
    """Add the peers' cases for `scenario` to `side` (a perf.measure.rounds.Side whose
    variants were just prepared as `cases`), record their skips; returns them."""
    batch = next((c.keep[0] for c in cases if c.keep), None)  # the variants' batch, shared
    expected = next((c.expected for c in cases if c.expected is not None), None)  # and its reference
    added = []
    for name in names:
        case = make_case(name, scenario, side.device, batch, expected)
        side.cases[(case.variant, scenario.name)] = case
        if case.skip is not None and side.writer is not None:
            side.writer.skip(variant=case.variant, scenario=scenario.name, reason=case.skip, kind=case.kind)
        added.append(case)
    return added


def detach(side, scenario, names) -> None:
    for name in names:
        side.cases.pop((PREFIX + name, scenario.name), None)
