"""The output plan (transforms/plan.py): select -> tokenize -> stack -> downcast in one callable,
the statistics hook before the downcast, rows numbered for a worker's part, and the manifest's
sections; its values checked against NumPy doing the same by hand."""

from __future__ import annotations

import numpy as np
import pytest

from lovecraft_convert.errors import OptionsError, OverflowErrorF16
from lovecraft_convert.schema import STRING, Batch, Field, Schema, VarColumn
from lovecraft_convert.stats import BatchStats
from lovecraft_convert.transforms.plan import OutputPlan, select_columns


def _batch(n: int = 6, start: float = 0.0) -> tuple[Schema, Batch]:
    a = np.arange(n, dtype=np.float64) + start
    b = np.arange(n, dtype=np.int32)
    text = [f"w{i}".encode() for i in range(n)]
    schema = Schema(
        (
            Field("a", "fixed", "<f8"),
            Field("c0", "fixed", "<f4"),
            Field("c1", "fixed", "<f4"),
            Field("b", "fixed", "<i4"),
            Field("t", STRING, "|u1"),
        )
    )
    cols = {
        "a": a,
        "c0": (a * 2).astype(np.float32),
        "c1": (a * 3).astype(np.float32),
        "b": b,
        "t": VarColumn.from_pylist(text, np.uint8),
    }
    return schema, Batch(cols, n)


def test_every_step_in_one_call():
    schema, batch = _batch()
    plan = OutputPlan.build(
        schema, "in.csv", columns=["b", "c", "a"], stack_columns=["c=c0:c1"], dtype="float16", on_overflow="error"
    )
    assert plan.source.names == ["b", "c0", "c1", "a"]  # --columns names the stack: its members, in place
    assert [(f.name, f.dtype, f.shape) for f in plan.schema] == [
        ("b", "<i4", ()),
        ("c", "<f2", (2,)),
        ("a", "<f2", ()),
    ]
    out = plan(batch)
    assert out.columns["b"].tolist() == batch.columns["b"].tolist()
    want = np.stack([batch.columns["c0"], batch.columns["c1"]], axis=1).astype(np.float16)
    assert np.array_equal(out.columns["c"], want) and out.columns["c"].dtype == np.float16
    assert out.columns["a"].tolist() == batch.columns["a"].astype(np.float16).tolist()
    assert plan(batch).num_rows == 6 and set(plan.report()) == {"c", "a"} and plan.report()["a"]["values"] == 12
    assert plan.extra() == {
        "notes": [
            "--dtype float16 narrows floating columns; integer columns are kept as they are: b "
            "(to narrow them too: --column-type b=float16)"
        ]
    }


def test_the_statistics_hook_describes_the_values_written():
    """Taken before the downcast, from the wide source (cheaper), as the narrowed values."""
    schema, batch = _batch(start=0.1)
    plan = OutputPlan.build(schema, "in.csv", columns=["a"], dtype="float16")
    stats = BatchStats(plan.schema)
    out = plan(batch, stats)
    assert out.columns["a"].dtype == np.float16
    st = stats.to_dict()["a"]
    assert st["count"] == 6 and st["min"] == float(np.float16(0.1)) and st["max"] == float(np.float16(5.1))
    assert plan.finish(plan.prepare(batch)).columns["a"].tolist() == out.columns["a"].tolist()


def test_tokenize_then_keep():
    schema, batch = _batch(3)
    plan = OutputPlan.build(schema, "in.csv", tokenizer="bytes", column="t", columns=["b"], eos=0)
    assert plan.source.names == ["t", "b"] and plan.schema.names == ["tokens", "b"]
    tokens = plan(batch).columns["tokens"]
    assert [tokens.values[tokens.offsets[i] : tokens.offsets[i + 1]].tolist() for i in range(3)] == [
        [119, 48, 0],
        [119, 49, 0],
        [119, 50, 0],
    ]
    assert plan.tokens_extra()["tokenizer"]["column"] == "t"


def test_rows_are_numbered_from_the_part():
    schema = Schema((Field("x", "fixed", "<f4"),))
    batch = Batch({"x": np.array([1.0, 7e4], dtype=np.float32)}, 2)
    plan = OutputPlan.build(schema, "big.npy", dtype="float16").at_row(1000)
    with pytest.raises(OverflowErrorF16) as e:
        plan(batch)
    assert e.value.row == 1002 and e.value.column == "x"
    unplaced = OutputPlan.build(schema, "big.npy", dtype="float16").at_row(None)
    with pytest.raises(OverflowErrorF16) as e:
        unplaced(batch)
    assert e.value.row is None and e.value.local_row == 1  # placed by the driver, which knows the part


def test_the_identity_plan_only_counts():
    schema, batch = _batch()
    plan = OutputPlan.identity(schema)
    stats = BatchStats(schema)
    assert plan(batch, stats) is batch and plan.report() == {} and plan.extra() == {} and plan.tokens_extra() == {}
    assert stats.to_dict()["b"]["count"] == 6


def test_selecting_a_missing_or_doubly_named_column():
    schema, _ = _batch()
    with pytest.raises(OptionsError) as e:
        select_columns(schema, ["a", "zz"])
    assert e.value.one_line() == "columns: no column 'zz'; columns are a, c0, c1, b, t"  # a Python caller's
    with pytest.raises(OptionsError) as e:
        select_columns(schema, ["c", "c0"], ["c=c0:c1"])
    assert e.value.one_line() == "columns names 'c0', which is stacked into 'c'; name 'c' alone"
