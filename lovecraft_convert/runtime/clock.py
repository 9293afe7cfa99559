"""Where a unit's time goes: the seconds its process spends waiting on the object store, by kind,
for the time split of ``make bench`` and ``LOVECRAFT_UNIT_LOG`` (see :mod:`lovecraft_convert.engine.units`).

* ``read``: reading the input (ranged GETs);
* ``spill``: spill frames going to the store (phase 1) and coming back (phase 2);
* ``upload``: the output's files going up (waits for a streamed file's parts, whole uploads).

What is left of a unit's wall time is its compute (parsing, transforming, encoding, hashing).
A unit's ``timing`` also has its ``seconds`` (wall) and ``cpu`` (the CPU seconds of its process,
all threads), which a machine shared with other work does not inflate.
The counters are per process: a unit runs alone in its worker process (or units run one after
another in-process); seconds a background thread of the unit spends waiting count too, seconds an
upload thread works while the unit goes on do not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_spent: dict[str, float] = {}


@contextmanager
def timed(kind: str) -> Iterator[None]:
    """Count the seconds of the block as waiting of ``kind``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        with _lock:
            _spent[kind] = _spent.get(kind, 0.0) + dt


def take() -> dict[str, float]:
    """The seconds counted since the last call, by kind (and the counters cleared)."""
    with _lock:
        out = dict(_spent)
        _spent.clear()
    return out
