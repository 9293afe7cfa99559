"""The spill side of ``--dedup exact``: a part's scan writes four files whatever its entries, the
decisions are groups of fine partitions sized from the scans' counts, a damaged section is one
line naming the file, and the drop set answers as a brute-force first-occurrence computation does."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lovecraft_convert.engine.dedup import decide_here, plan_groups, scan_part
from lovecraft_convert.errors import OutputError
from lovecraft_convert.schema import Batch, Field, Schema
from lovecraft_convert.transforms.dedup import ENTRY, FINE, PART_SHIFT, Dedup, DropSet

SCHEMA = Schema((Field("k", "fixed", "<i8"),))
DEDUP = Dedup("exact", ("k",))


def _batches(keys: np.ndarray, rows: int = 5_000):
    for a in range(0, len(keys), rows):
        yield Batch({"k": keys[a : a + rows]})


def _scan(tmp_path, parts: list[np.ndarray], run_entries: int = 3_000) -> list[dict]:
    return [scan_part(_batches(k), None, SCHEMA, DEDUP, p, str(tmp_path), run_entries) for p, k in enumerate(parts)]


def _first_occurrences(parts: list[np.ndarray]) -> dict[int, int]:
    """Brute force: every dropped position and the position it repeats."""
    seen: dict[int, int] = {}
    out = {}
    for p, keys in enumerate(parts):
        for r, k in enumerate(keys.tolist()):
            pos = (p << PART_SHIFT) | r
            if k in seen:
                out[pos] = seen[k]
            else:
                seen[k] = pos
    return out


def test_four_files_per_part_and_groups_within_the_cap(tmp_path):
    rng = np.random.default_rng(1)
    parts = [rng.integers(0, 40_000, size=30_000) for _ in range(3)]
    scans = _scan(tmp_path, parts)
    assert all(s["runs"] > 1 for s in scans)
    assert sorted(os.listdir(tmp_path)) == sorted(
        f"{x}{p:05d}-b{b:04d}.bin" for p in range(3) for x in "hl" for b in range(2)
    )
    groups = plan_groups(str(tmp_path), scans, 5_000)
    assert groups[0][0] == 0 and groups[-1][1] == FINE
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:], strict=False))
    assert len(groups) > 5
    # each group's entries, counted from the entry files directly, fit the cap
    fine = np.concatenate(
        [
            np.fromfile(os.path.join(tmp_path, f"h{p:05d}-b0000.bin"), dtype=ENTRY)["hi"] >> np.uint64(52)
            for p in range(3)
        ]
    ).astype(np.int64)
    counts = np.bincount(fine, minlength=FINE)
    for lo, hi in groups:
        assert counts[lo:hi].sum() <= 5_000 or hi - lo == 1


def test_the_drop_set_is_the_first_occurrences(tmp_path):
    rng = np.random.default_rng(2)
    parts = [rng.integers(0, 9_000, size=n) for n in (12_000, 1, 7_000)]
    scans = _scan(tmp_path, parts)
    n = decide_here(str(tmp_path), scans, 4_000)
    want = _first_occurrences(parts)
    got = {}
    for p in range(3):
        drops = DropSet(str(tmp_path), p, n)
        d, k = drops.between(p << PART_SHIFT, (p + 1) << PART_SHIFT, with_kept=True)
        got.update(zip(d.tolist(), drops.kept_of(k).tolist(), strict=True))
    assert got == want


def test_a_damaged_section_is_one_line(tmp_path):
    keys = np.arange(20_000) % 7_000
    scans = _scan(tmp_path, [keys])
    path = os.path.join(tmp_path, "h00000-b0000.bin")
    with open(path, "r+b") as f:
        f.seek(ENTRY.itemsize * 100 + 3)
        b = f.read(1)
        f.seek(ENTRY.itemsize * 100 + 3)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(OutputError) as e:
        decide_here(str(tmp_path), scans, 1_000_000)
    assert str(e.value).startswith(f"{path}: dedup spill file is damaged (the entries of partition ")
    assert str(e.value).endswith("the part that wrote it is read again")
