"""How much longer wall-clock work takes on this machine, now, than on the quiet 2-core machine the suite's
few second-bounds were set on: the one place a test scales such a bound (issue 43 item 7: a fresh clone's
`make test` on a loaded machine failed `ranks[0].seconds < 20` at 20.7 s).

Most timing checks need no factor: a budget counts CPU time (fast_budget.py), and a "did it wait?" check
compares order or phases (who started first, which error says it was stopped). A bound in seconds stays only
where the product's behaviour is the duration itself (a 3 s rendezvous bound, where the old behaviour was
660 s); it is written ``fixed + scaled(work)``: the product's own timer is not stretched by load, the work
around it (interpreter starts, imports) is.

    from machine_factor import scaled
    assert result["scenario_seconds"] < 3 + scaled(12)
"""

from __future__ import annotations

import os
import statistics
import time

# CPU seconds of one `_probe()` on the machine the bounds were set on (its wall time when it was quiet). CPU
# time, not wall: measured while the machine was busy (load 10 on 2 cores, 2026-12-05) it is the same.
REFERENCE_SECONDS = 0.022


def _probe() -> int:
    """A fixed piece of pure-Python work (~20 ms), the kind an interpreter start or an import is."""
    total = 0
    for i in range(400_000):
        total += i * i % 7
    return total


def machine_factor(rounds: int = 3) -> float:
    """How many times longer wall-clock work takes here and now than on the reference machine when quiet,
    at least 1: the median wall time of the probe over its reference, or the run queue per core (the
    1-minute load average: the probe is a snapshot; a scenario of seconds sees the minute's load), whichever
    is larger."""
    walls = []
    for _ in range(rounds):
        began = time.perf_counter()
        _probe()
        walls.append(time.perf_counter() - began)
    queue = os.getloadavg()[0] / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else 0.0
    return max(1.0, statistics.median(walls) / REFERENCE_SECONDS, queue)


def scaled(seconds: float) -> float:
    """`seconds` of work on the quiet reference machine, as this machine takes it now."""
    return seconds * machine_factor()
