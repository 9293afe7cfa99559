"""The read-ahead thread: it starts reading when it is made, holds at most ``depth`` batches or, when
they are small, up to ``max_bytes`` of them, gives every batch in order and the reader's error in
its place, and stops when left, read to the end or not."""

import threading
import time

import numpy as np
import pytest

from lovecraft_convert.runtime.readahead import Prefetch, prefetch
from lovecraft_convert.schema import Batch


def _batch(i: int, rows: int) -> Batch:
    return Batch({"x": np.full(rows, i, dtype=np.int64)}, rows)  # rows * 8 bytes


class _Source:
    """Batches of ``rows`` rows each, counting how many were taken from it."""

    def __init__(self, n: int, rows: int, fail_at: int | None = None) -> None:
        self.n, self.rows, self.fail_at = n, rows, fail_at
        self.taken = 0
        self.finished = threading.Event()

    def __iter__(self):
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise ValueError(f"bad batch {i}")
                self.taken += 1
                yield _batch(i, self.rows)
        finally:
            self.finished.set()


def _settled(src: _Source) -> int:
    """How many batches the thread took once it stopped taking more."""
    last, still = -1, 0
    while still < 20:
        time.sleep(0.01)
        still = still + 1 if src.taken == last else 0
        last = src.taken
    return last


@pytest.mark.parametrize(
    ("rows", "max_bytes", "ahead"),
    [
        (1000, 0, 2),  # two batches wait; the thread holds a third it cannot put
        (1000, 8000, 2),  # large batches (8,000 bytes): still two
        (100, 32000, 40),  # small ones (800 bytes): until those waiting reach max_bytes
    ],
)
def test_reads_ahead_from_the_start_up_to_depth_or_max_bytes(rows, max_bytes, ahead):
    src = _Source(200, rows)
    with Prefetch(iter(src), 2, max_bytes) as p:
        held = _settled(src)  # nothing asked for yet: read ahead all the same
        assert held == ahead + 1
        got = [int(b.columns["x"][0]) for b in p]
    assert got == list(range(200))


def test_the_readers_error_comes_in_its_place():
    src = _Source(10, 10, fail_at=4)
    got = []
    with pytest.raises(ValueError, match="bad batch 4"), Prefetch(iter(src), 2, 1 << 20) as p:
        got.extend(int(b.columns["x"][0]) for b in p)
    assert got == [0, 1, 2, 3]


def test_left_before_the_first_batch_the_thread_stops():
    src = _Source(10**6, 10)
    with Prefetch(iter(src), 2) as p:
        _settled(src)
    assert not p.t.is_alive() and src.taken == 3
    assert src.finished.wait(5)  # the source was closed (its files, say), in the thread that read it


def test_the_generator_form_stops_its_thread_when_closed():
    src = _Source(10**6, 10)
    it = prefetch(iter(src), 2)
    assert int(next(it).columns["x"][0]) == 0
    it.close()
    assert src.finished.wait(5)
