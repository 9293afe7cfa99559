"""Wide tables are written in gathered batches: the rows, their order and their values are those
of the reader's batches; narrow tables pass through untouched."""

import numpy as np

from lovecraft_convert.engine.pipeline import coalesce
from lovecraft_convert.schema import WIDE_COLUMNS, Batch, VarColumn


def _batches(columns: int, sizes: list[int]) -> list[Batch]:
    out, start = [], 0
    for n in sizes:
        cols = {f"c{j}": np.arange(start, start + n, dtype=np.float64) + j / 1000 for j in range(columns)}
        offs = np.arange(n + 1, dtype=np.int64)
        cols["text"] = VarColumn(np.frombuffer(bytes(range(start, start + n)), dtype=np.uint8), offs)
        out.append(Batch(cols, n))
        start += n
    return out


def test_narrow_batches_pass_through_as_they_are():
    src = _batches(3, [5, 7, 2])
    assert [b is s for b, s in zip(coalesce(iter(src), 1 << 30), src, strict=True)] == [True] * 3


def test_wide_batches_are_gathered_to_the_target_keeping_every_row_in_order():
    src = _batches(WIDE_COLUMNS, [5, 7, 2, 9, 1, 3])
    per_row = src[0].nbytes // 5
    out = list(coalesce(iter(src), 12 * per_row))
    assert [b.num_rows for b in out] == [12, 12, 3]  # 5+7 reach the target, then 2+9+1; 3 is the rest
    for name in src[0].columns:
        if name == "text":
            got = np.concatenate([b.columns[name].values for b in out])
            want = np.concatenate([b.columns[name].values for b in src])
            offs = np.concatenate([b.columns[name].offsets[1:] for b in out])
            assert np.array_equal(got, want) and len(offs) == 27
        else:
            got = np.concatenate([b.columns[name] for b in out])
            assert np.array_equal(got, np.arange(27) + int(name[1:]) / 1000)


def test_wide_batches_of_half_the_target_pass_through_unless_rows_are_waiting():
    src = _batches(WIDE_COLUMNS, [6, 2, 6, 7])
    per_row = src[0].nbytes // 6
    out = list(coalesce(iter(src), 12 * per_row))
    assert out[0] is src[0]  # half the target already: not copied into a gathered batch
    assert [b.num_rows for b in out] == [6, 15]  # then 2 waits for rows, so 6 and 7 join it
    got = np.concatenate([b.columns["c1"] for b in out])
    assert np.array_equal(got, np.arange(21) + 1 / 1000)


def _matrix_batches(columns: int, sizes: list[int]) -> list[Batch]:
    out, start = [], 0
    for n in sizes:
        m = np.ascontiguousarray((np.arange(start, start + n)[:, None] + np.arange(columns) / 1000).T)
        out.append(Batch.from_matrix([f"c{j}" for j in range(columns)], m))
        start += n
    return out


def test_a_wide_table_read_as_one_matrix_passes_through_uncopied():
    """Every step takes a matrix batch whole (statistics fold it, writers gather it into their own
    blocks): gathering it would only copy it and hold the copies in flight."""
    src = _matrix_batches(WIDE_COLUMNS, [5, 7, 2, 9])
    out = list(coalesce(iter(src), 12 * (src[0].nbytes // 5)))
    assert [b is s for b, s in zip(out, src, strict=True)] == [True] * 4


def test_matrix_batches_concatenate_into_one_matrix():
    src = _matrix_batches(WIDE_COLUMNS, [5, 7, 2, 9])
    names = list(src[0].columns)
    b = Batch.concat(src)
    m = b.matrix_of(names)  # one matrix again, its rows the columns in order
    assert m is not None and m.shape == (WIDE_COLUMNS, 23) and b.num_rows == 23
    assert all(np.shares_memory(b.columns[n], m) for n in names)
    assert np.array_equal(b.columns["c3"], np.arange(23) + 3 / 1000)


def test_matrix_of_answers_only_for_the_columns_it_holds_in_their_order():
    (b,) = _matrix_batches(WIDE_COLUMNS, [4])
    names = list(b.columns)
    assert b.matrix_of(names) is b.matrix
    assert b.matrix_of(names[::-1]) is None  # another order: its rows are not these columns
    assert b.matrix_of(names[1:]) is None
    b.columns["c0"] = b.columns["c0"] + 1  # a column replaced: no longer the matrix's row
    assert b.matrix_of(names) is None
    assert Batch(dict(b.columns), 4).matrix_of(names) is None  # made without a matrix
    mixed = _matrix_batches(WIDE_COLUMNS, [3]) + _batches(WIDE_COLUMNS, [2])
    for part in mixed[1:]:
        del part.columns["text"]
    out = Batch.concat(mixed)  # one part without a matrix: column by column, the same values
    want = np.concatenate([np.arange(3), np.arange(2)]) + 2 / 1000  # each helper counts rows from 0
    assert out.matrix is None and np.array_equal(out.columns["c2"], want)
