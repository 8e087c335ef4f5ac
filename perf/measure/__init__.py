"""The measuring stage: cases made ready outside the timed region, rounds, device time.

`cases.py` (one variant on one scenario, ready to time), `rounds.py` (every case once per
round, in a shuffled order), `timing.py` (device time, no host time), `peer_cases.py`
(vendor libraries as cases), `run.py` (`perf run`), `host_cost.py` (`perf host-cost`),
`timing_check.py`. The latency gate, the nightly, tune and the static report use it; it
imports no room.
"""
