"""``--dedup exact`` under a hard memory limit: a JSON Lines input of ~400 MB whose texts repeat
(a vocabulary of 600,000 texts drawn 3,600,000 times, some of them in every batch) is deduplicated
by ``convert`` and by ``shard --workers 2`` under ``memcap 256`` with ``--max-memory 128MiB``, the
peak reported (the sizes, the cap and the budget can be raised by hand, see SCALE below). The ids kept are compared with the first occurrence of each text, computed here from
the generator (np.unique's first indices), read back with pyarrow; ``--dedup-report`` is checked
to have a line per dropped row.

Slow; skipped with the reason when memcap is absent or cannot make a cgroup, or when the disk has
less than 3 GB free.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import SHARED, SUBPROCESS_ENV, memcapped, require_memcap

pytestmark = pytest.mark.slow

MEMCAP = os.path.join(SHARED, "tools", "memcap")
# LOVECRAFT_MEMCAP_DEDUP_SCALE=10 makes the input ~4 GB (36,000,000 rows); run by hand, with the
# cap and budget the issue names: LOVECRAFT_MEMCAP_DEDUP_CAP=512 LOVECRAFT_MEMCAP_DEDUP_BUDGET=256MiB
SCALE = float(os.environ.get("LOVECRAFT_MEMCAP_DEDUP_SCALE", "1"))
CAP_MIB = int(os.environ.get("LOVECRAFT_MEMCAP_DEDUP_CAP", "256"))
BUDGET = os.environ.get("LOVECRAFT_MEMCAP_DEDUP_BUDGET", "128MiB")
ROWS = int(3_600_000 * SCALE)
VOCAB = int(600_000 * SCALE)
HOT = 50  # texts drawn in every block of rows: many duplicates within each batch
FREE_BYTES = int(3 * 10**9 * max(1.0, SCALE / 2))  # the input, and per command its output and report
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit " * 3


class AnonPeak:
    """The peak anonymous memory (RssAnon, summed over the process tree) of the command whose
    arguments hold ``marker`` (the test's output path) and its worker processes, sampled from /proc
    every 50 ms while the block runs (the cgroup's own peak counts the page cache the input and
    outputs pass through, which the kernel reclaims at the cap)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker.encode()
        self.kib = 0

    def __enter__(self) -> AnonPeak:
        import threading

        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def mib(self) -> float:
        return self.kib / 1024

    @staticmethod
    def _read(path: str, mode: str = "r"):
        try:
            with open(path, mode) as f:
                return f.read()
        except OSError:
            return b"" if "b" in mode else ""

    def _sample(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            roots = [
                int(p)
                for p in os.listdir("/proc")
                if p.isdigit() and int(p) != me and self.marker in self._read(f"/proc/{p}/cmdline", "rb")
            ]
            total, todo, seen = 0, roots, set()
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                status = self._read(f"/proc/{pid}/status")
                total += next((int(x.split()[1]) for x in status.splitlines() if x.startswith("RssAnon:")), 0)
                for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
                    todo += [int(c) for c in self._read(f"/proc/{pid}/task/{tid}/children").split()]
            self.kib = max(self.kib, total)
            self.stop.wait(0.05)


def _text(k: int) -> str:
    return f"doc {k:07d} " + FILLER[: k % 150]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Iterator[tuple[str, np.ndarray]]:
    """(the JSON Lines file, the text index of every row)."""
    require_memcap()
    d = tmp_path_factory.mktemp("memcap_dedup")
    if shutil.disk_usage(d).free < FREE_BYTES:
        pytest.skip(f"less than {FREE_BYTES / 1e9:.0f} GB free at {d}")
    rng = np.random.default_rng(45)
    keys = rng.integers(0, VOCAB, size=ROWS)
    keys[::7] = rng.integers(0, HOT, size=len(keys[::7]))
    texts = [_text(k) for k in range(VOCAB)]
    p = d / "dups.jsonl"
    with open(p, "w") as f:
        step = 100_000
        for a in range(0, ROWS, step):
            f.write(
                "".join(f'{{"id": {i}, "text": "{texts[k]}"}}\n' for i, k in enumerate(keys[a : a + step].tolist(), a))
            )
    print(f"\ndedup corpus {os.path.getsize(p) / 2**20:.0f} MiB, {ROWS} rows, {len(np.unique(keys))} distinct texts")
    yield str(p), keys
    shutil.rmtree(d, ignore_errors=True)


def _kept_ids(out: str) -> np.ndarray:
    import pyarrow.parquet as pq

    ids = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".parquet"):
            pf = pq.ParquetFile(os.path.join(out, name))
            for b in pf.iter_batches(columns=["id"], batch_size=1 << 16):
                ids.append(b.column(0).to_numpy())
    return np.concatenate(ids)


@pytest.mark.parametrize(
    "command", [["convert"], ["shard", "--num-shards", "4", "--workers", "2"]], ids=["convert", "shard-2-workers"]
)
def test_dedup_under_memcap(tmp_path, corpus, command):
    src, keys = corpus
    out = str(tmp_path / "out")
    report = str(tmp_path / "dropped.jsonl")
    t0 = time.time()
    cmd = [LOVECRAFT, *command, src, "-o", out, "--to", "parquet", "--dedup", "exact", "--dedup-columns", "text",
           "--dedup-report", report, "--max-memory", BUDGET, "-q"]  # fmt: skip
    with AnonPeak(out) as anon:
        r, peak = memcapped(MEMCAP, CAP_MIB, cmd, timeout=3600, env=SUBPROCESS_ENV)
    took = time.time() - t0
    print(
        f"\n{command[0]} --dedup exact: rc {r.returncode}, {took:.0f}s, peak anonymous memory {anon.mib:.0f} MiB "
        f"(the cgroup's peak, page cache included, {peak} MiB; cap {CAP_MIB})"
    )
    assert r.returncode == 0, f"rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
    _u, first = np.unique(keys, return_index=True)
    want = np.sort(first)
    got = _kept_ids(out)
    assert np.array_equal(got, want)
    with open(os.path.join(out, "_manifest.json")) as f:
        m = json.load(f)
    assert m["removed"]["duplicate"]["rows"] == ROWS - len(want)
    with open(report, "rb") as f:
        assert sum(1 for _ in f) == ROWS - len(want)
