"""Errors raised inside worker processes reach the user as the same one line, placed in the input."""

from __future__ import annotations

import os

import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import OverflowErrorF16
from tests.conftest import leftovers


@pytest.mark.parametrize("workers", [1, 2])
def test_float16_overflow_in_a_later_part_names_the_global_row(tmp_path, workers):
    rows = 60_000
    lines = ["x"] + ["1.5"] * rows
    lines[45_001] = "70000.0"  # row 45001 of the input, in a later part (parts of 64 KiB: ~16k rows)
    src = tmp_path / "big.csv"
    src.write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "out")
    with pytest.raises(OverflowErrorF16) as info:
        lc.shard(str(src), out, to="parquet", num_shards=2, dtype="float16", workers=workers, part_bytes=64 << 10)
    assert info.value.part >= 2  # raised by the unit of a later part, which knew only its own rows
    assert info.value.one_line() == (
        f"{src}, row 45001, column 'x': value 70000.0 overflows float16 (max 65504.0); "
        "scale the data, keep a wider type, or pass on_overflow='clip'"
    )  # raised in a worker, spelled for the Python caller that shows it
    assert not os.path.exists(out)
    assert leftovers(tmp_path) == []
