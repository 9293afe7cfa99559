"""The spill side of ``--dedup near`` (engine/near.py): the components step against a brute-force
union-find in Python (hypothesis: parts of any sizes, edges in any order, blocks of any size), the
candidate pairs of a bucket, and a scan's files."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lovecraft_convert.engine.near import candidates, components, scan_near_part
from lovecraft_convert.schema import Batch, Field, Schema, VarColumn
from lovecraft_convert.transforms.dedup import ENTRY, PART_SHIFT, Dedup, DropSet
from lovecraft_convert.transforms.near import NearParams


def _brute(rows: list[int], edges: list[tuple[int, int]]) -> dict[int, int]:
    """Dense row -> the smallest row of its component, for the rows that are not the smallest."""
    parent = list(range(sum(rows)))

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in range(len(parent)) if find(x) != x}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    data=st.data(),
    groups=st.integers(1, 3),
    block=st.sampled_from([1, 2, 7, 1 << 16]),
)
def test_components_equal_a_brute_force_union_find(tmp_path_factory, rows, data, groups, block):
    d = str(tmp_path_factory.mktemp("cc"))
    total = sum(rows)
    parts = list(range(0, 2 * len(rows), 2))  # part numbers need not be consecutive
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(int)

    def pos(x: int) -> int:
        k = int(np.searchsorted(starts, x, side="right") - 1)
        while rows[k] == 0 or x - starts[k] >= rows[k]:
            k += 1
        return (parts[k] << PART_SHIFT) | (x - int(starts[k]))

    edges = []
    if total >= 2:
        pair = st.tuples(st.integers(0, total - 1), st.integers(0, total - 1)).filter(lambda p: p[0] != p[1])
        edges = data.draw(st.lists(pair, max_size=60))
    for g in range(groups):
        mine = [(min(a, b), max(a, b)) for k, (a, b) in enumerate(edges) if k % groups == g]
        arr = np.array([[pos(a), pos(b)] for a, b in mine], dtype="<i8").reshape(-1, 2)
        np.save(os.path.join(d, f"e{g:04d}-edges.npy"), arr)
    scans = [{"part": p, "read": r} for p, r in zip(parts, rows, strict=True)]
    res = components(d, scans, groups, block=block)
    want = _brute(rows, edges)
    drop = np.load(os.path.join(d, "x0000-drop.npy"))
    kept = np.load(os.path.join(d, "x0000-kept.npy"))
    assert drop.tolist() == sorted(pos(x) for x in want)
    assert dict(zip(drop.tolist(), kept.tolist(), strict=True)) == {pos(x): pos(r) for x, r in want.items()}
    assert res["drops"] == len(want)
    assert not os.path.exists(os.path.join(d, "c-parent.bin"))
    # the write step's drop set reads them
    for p, r in zip(parts, rows, strict=True):
        got = DropSet(d, p, 1).between(p << PART_SHIFT, (p << PART_SHIFT) + r)
        assert got.tolist() == [x for x in drop.tolist() if x >> PART_SHIFT == p]


def test_a_bucket_is_paired_with_its_first_and_previous_rows():
    e = np.zeros(6, dtype=ENTRY)
    e["hi"] = [5, 5, 5, 5, 9, 9]
    e["lo"] = [1, 1, 1, 1, 2, 3]
    e["pos"] = [40, 10, 30, 20, 1, 2]  # a bucket of four (in any order), two rows alone
    a, b = candidates(e)
    assert sorted(zip(a.tolist(), b.tolist(), strict=True)) == [(10, 20), (10, 30), (10, 40), (20, 30), (30, 40)]


def test_a_scan_writes_a_signature_per_row_read(tmp_path):
    texts = [f"doc {i} " + "a b c d e f g h " * (i % 3) for i in range(50)]
    batch = Batch({"text": VarColumn.from_pylist(texts, np.uint8)})
    schema = Schema((Field("text", "string", "|u1"),))
    dedup = Dedup("near", ("text",), NearParams(bands=4, band_rows=2))

    def keep(b):
        return np.arange(b.num_rows) % 2 == 0

    res = scan_near_part(iter([batch, batch]), keep, schema, dedup, 3, str(tmp_path), 64, 1 << 12)
    assert (res["read"], res["kept"]) == (100, 50)
    assert sorted(res["files"]) == ["h00003-b0000.bin", "h00003-b0001.bin", "s00003.bin"]
    sig = np.fromfile(tmp_path / "s00003.bin", dtype="<u4").reshape(100, 8)
    assert (sig[1::2] == 0xFFFFFFFF).all()  # the rows the filter removed
    assert (sig[0:50:2] == sig[50::2]).all()  # the same text, the same signature
    assert os.path.getsize(tmp_path / "h00003-b0000.bin") == 50 * 4 * ENTRY.itemsize  # one entry per band
    assert res["runs"] > 1
