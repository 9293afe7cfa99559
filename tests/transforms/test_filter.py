"""``--filter EXPR``: the expression language (our parser, never eval), its one-line errors with
their exit codes, and the rows it keeps compared with the same predicate computed by polars on the
source, through ``convert`` and ``shard`` (the output read back with pyarrow)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lovecraft_convert import convert, shard
from lovecraft_convert.errors import OptionsError, SchemaError
from lovecraft_convert.schema import Batch, Field, Schema, VarColumn
from lovecraft_convert.transforms.filter import Filter
from tests.conftest import lovecraft
from tests.readback import manifest

pl = pytest.importorskip("polars")

SCHEMA = Schema(
    (
        Field("text", "string", "|u1"),
        Field("lang", "string", "|u1"),
        Field("label", "fixed", "<i8"),
        Field("x", "fixed", "<f8"),
        Field("seq", "sequence", "<i4"),
    )
)


def _batch() -> Batch:
    return Batch(
        {
            "text": VarColumn.from_pylist(["hello", "hi", "ééé", ""], np.uint8),
            "lang": VarColumn.from_pylist(["en", "fr", "en", "en"], np.uint8),
            "label": np.array([1, 2, 3, 1]),
            "x": np.array([1.0, np.nan, 3.0, -1.0]),
            "seq": VarColumn(np.arange(6, dtype=np.int32), np.array([0, 1, 3, 3, 6])),
        }
    )


@pytest.mark.parametrize(
    "expr, want",
    [
        ("len(text) >= 3", [True, False, True, False]),  # characters, not bytes: 'ééé' is 3
        ('lang == "en"', [True, False, True, True]),
        ("lang != 'en'", [False, True, False, False]),
        ("label in (1, 2)", [True, True, False, True]),
        ("label not in (1,)", [False, True, True, False]),
        ("not isnan(x)", [True, False, True, True]),
        ("x > -0.5", [True, False, True, False]),  # NaN compares false
        ("not x > -0.5", [False, False, False, True]),  # ... and so does its negation
        ("isnull(x) or label == 3", [False, True, True, False]),
        ('lang == "en" and (label == 1 or len(seq) == 3)', [True, False, False, True]),
        ("len(seq) == 0", [False, False, True, False]),
        ('upper(lang) == "EN"', [True, False, True, True]),
        ("`label` >= 2 and x < 10", [False, False, True, False]),
        ("label == 1.0", [True, False, False, True]),
        ("label in (1.5, 3)", [False, False, True, False]),
    ],
)
def test_masks(expr, want):
    assert Filter(expr).check(SCHEMA).mask(_batch()).tolist() == want


def test_columns_read_in_order():
    assert Filter('len(text) > 1 and lang in ("en") or not isnan(x) or lang == "x"').columns == ["text", "lang", "x"]


@pytest.mark.parametrize(
    "expr, cls, message",
    [
        ("len(text) >= ", OptionsError, "the expression ends where a value was expected at position 14; complete the condition"),
        ('lang = "en"', OptionsError, "unexpected '=' at position 6; compare with =="),
        ("label in 1", OptionsError, "expected '(', found '1' at position 10; list the values in parentheses, e.g. label in (1, 2)"),
        ("foo(x) > 1", OptionsError, "unknown function 'foo' at position 1; the functions are len, isnan, isnull, lower, upper"),
        ('"abc', OptionsError, 'a string not closed at position 1; end it with "'),
        ('lang == "en" lang', OptionsError, "unexpected 'lang' at position 14; join conditions with and / or"),
        ("x", OptionsError, "the expression is a number, not a condition at position 1; compare it, e.g. x > 0"),
        ("__import__('os')", OptionsError, "unknown function '__import__' at position 1"),  # never evaluated
        ("lng == 'en'", OptionsError, "no column 'lng' at position 1; columns are text, lang, label, x, seq (text is quoted: \"lng\")"),
        ("x == nan", OptionsError, "no column 'nan' at position 6; columns are text, lang, label, x, seq (NaN is tested with isnan(COLUMN))"),
        ("text > 3", SchemaError, "cannot compare a string with a number (column 'text' is a string) at position 6; compare like with like (quote text)"),
        ("isnan(text)", SchemaError, "isnan() of column 'text', a string at position 1; isnan() takes a number column"),
        ("seq == 1", SchemaError, "cannot compare a list with a number (column 'seq' is a list) at position 5; compare len(COLUMN) for a list"),
        # integers beyond int64 were a traceback (OverflowError from pyarrow's scalar), in any comparison
        ("label == 99999999999999999999999", OptionsError, "the integer 99999999999999999999999 is beyond the 64-bit integers at position 10; write it as a float to compare it as one (1e+23)"),
        ("x < -9223372036854775809", OptionsError, "the integer -9223372036854775809 is beyond the 64-bit integers at position 5; write it as a float to compare it as one (-9.223372036854776e+18)"),
        ("label in (1, 18446744073709551616)", OptionsError, "the integer 18446744073709551616 is beyond the 64-bit integers at position 14"),
    ],
)  # fmt: skip
def test_errors(expr, cls, message):
    with pytest.raises(cls) as e:
        Filter(expr).check(SCHEMA)
    assert type(e.value) is cls
    assert message in str(e.value)
    assert repr(expr) in str(e.value)


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory) -> str:
    rng = np.random.default_rng(7)
    p = tmp_path_factory.mktemp("filter") / "docs.jsonl"
    words = ["alpha", "beta", "gamma", "delta", "épsilon"]
    with open(p, "w", encoding="utf-8") as f:
        for i in range(20_000):
            text = " ".join(rng.choice(words, size=int(rng.integers(0, 60))))
            x = None if i % 11 == 0 else float(rng.normal())
            row = {
                "id": i,
                "text": text,
                "lang": str(rng.choice(["en", "fr", "de"])),
                "label": int(rng.integers(0, 5)),
                "x": x,
            }
            f.write(json.dumps(row) + "\n")
    return str(p)


CASES = [
    ('len(text) >= 200 and lang == "en"', lambda: (pl.col("text").str.len_chars() >= 200) & (pl.col("lang") == "en")),
    ("label in (1, 2)", lambda: pl.col("label").is_in([1, 2])),
    ("not isnull(x) and x > 0.5 or label == 4", lambda: (pl.col("x").is_not_null() & (pl.col("x") > 0.5)) | (pl.col("label") == 4)),
]  # fmt: skip


@pytest.mark.parametrize("expr, pred", CASES, ids=["len-lang", "in", "null-or"])
def test_convert_keeps_what_polars_keeps(tmp_path, jsonl, expr, pred):
    out = str(tmp_path / "out")
    convert(jsonl, out, to="parquet", filter=expr, max_memory="32MiB")
    src = pl.read_ndjson(jsonl)
    want = src.filter(pred())
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got["id"].to_list() == want["id"].to_list()
    assert got["text"].to_list() == want["text"].to_list()
    removed = manifest(out)["removed"]
    assert removed == {"read": len(src), "filter": {"expression": expr, "rows": len(src) - len(want)}}


def test_shard_keeps_what_polars_keeps_for_any_workers(tmp_path, jsonl):
    expr, pred = CASES[0]
    outs = []
    for w in (1, 2):
        out = str(tmp_path / f"w{w}")
        shard(jsonl, out, to="parquet", num_shards=3, workers=w, filter=expr, part_bytes=256 << 10)
        outs.append(out)
    want = pl.read_ndjson(jsonl).filter(pred())
    got = pl.read_parquet(os.path.join(outs[0], "*.parquet"))
    assert got["id"].to_list() == want["id"].to_list()
    for name in sorted(os.listdir(outs[0])):
        if name.endswith(".parquet"):
            with open(os.path.join(outs[0], name), "rb") as a, open(os.path.join(outs[1], name), "rb") as b:
                assert a.read() == b.read()
    assert manifest(outs[0])["removed"]["filter"]["rows"] == 20_000 - len(want)


def test_filter_column_not_kept_by_columns(tmp_path, jsonl):
    """A column the filter reads need not be written: --columns id keeps only ids."""
    out = str(tmp_path / "out")
    convert(jsonl, out, to="parquet", filter='lang == "de"', columns=["id"])
    want = pl.read_ndjson(jsonl).filter(pl.col("lang") == "de")["id"].to_list()
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    assert got.columns == ["id"] and got["id"].to_list() == want


def test_cli_syntax_error_is_a_usage_error(tmp_path, jsonl):
    r = lovecraft("convert", jsonl, "-o", str(tmp_path / "o"), "--to", "parquet", "--filter", "lang = 'en'")
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: --filter \"lang = 'en'\": unexpected '=' at position 6; compare with =="
    assert not os.path.exists(tmp_path / "o")


def test_cli_integer_beyond_int64_is_a_usage_error(tmp_path, jsonl):
    r = lovecraft(
        "convert", jsonl, "-o", str(tmp_path / "o"), "--to", "parquet", "--filter", "id > 9223372036854775808"
    )
    assert (r.exit_code, r.stderr) == (
        2,
        "Error: --filter 'id > 9223372036854775808': the integer 9223372036854775808 is beyond the 64-bit integers "
        "at position 6; write it as a float to compare it as one (9.223372036854776e+18)\n",
    )
    assert not os.path.exists(tmp_path / "o")


def test_cli_unknown_column_lists_the_columns(tmp_path, jsonl):
    r = lovecraft(
        "shard", jsonl, "-o", str(tmp_path / "o"), "--to", "parquet", "--num-shards", "2", "--filter", "lng == 'en'"
    )
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "Error: --filter \"lng == 'en'\": no column 'lng' at position 1; columns are id, text, lang, label, x "
        '(text is quoted: "lng")'
    )


def test_cli_type_error_is_a_data_error(tmp_path, jsonl):
    r = lovecraft("convert", jsonl, "-o", str(tmp_path / "o"), "--to", "parquet", "--filter", "text > 3")
    assert r.exit_code == 1
    assert r.stderr.strip().startswith("Error: --filter 'text > 3': cannot compare a string with a number")


def test_cli_everything_removed(tmp_path, jsonl):
    r = lovecraft("convert", jsonl, "-o", str(tmp_path / "o"), "--to", "parquet", "--filter", "label > 100")
    assert r.exit_code == 1
    assert r.stderr.strip() == f"Error: {jsonl}: all 20000 rows were removed (20000 by --filter); check --filter"
    assert not os.path.exists(tmp_path / "o")


def test_summary_counts_removed_rows(tmp_path, jsonl):
    r = lovecraft("convert", jsonl, "-o", str(tmp_path / "o"), "--to", "parquet", "--filter", "label in (0)")
    assert r.exit_code == 0, r.stderr
    kept = pl.read_ndjson(jsonl).filter(pl.col("label") == 0).height
    assert f"removed {20_000 - kept:,} rows of 20,000 read: {20_000 - kept:,} by --filter" in r.stderr


def _leaf():
    from hypothesis import strategies as st

    num = st.sampled_from(["label", "x"])
    ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
    value = st.integers(-1, 5) | st.sampled_from([0.5, -0.25, 2.0])
    return st.one_of(
        st.tuples(num, ops, value).map(lambda t: (f"{t[0]} {t[1]} {t[2]}", _pl_cmp(t[0], t[1], t[2]))),
        st.tuples(st.sampled_from(["==", "!="]), st.sampled_from(["en", "fr", "xx"])).map(
            lambda t: (f'lang {t[0]} "{t[1]}"', _pl_cmp("lang", t[0], t[1]))
        ),
        st.lists(st.integers(0, 5), min_size=1, max_size=3).map(
            lambda v: (f"label in ({', '.join(map(str, v))})", lambda: pl.col("label").is_in(v))
        ),
        st.just(("isnull(x)", lambda: pl.col("x").is_null())),
        st.integers(0, 250).map(lambda n: (f"len(text) >= {n}", lambda: pl.col("text").str.len_chars() >= n)),
    )


def _pl_cmp(col, op, v):
    import operator

    fn = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
          ">=": operator.ge}[op]  # fmt: skip
    return lambda: fn(pl.col(col), v)


def _tree():
    from hypothesis import strategies as st

    return st.recursive(
        _leaf(),
        lambda kids: st.one_of(
            st.tuples(kids, st.sampled_from(["and", "or"]), kids).map(
                lambda t: (
                    f"({t[0][0]}) {t[1]} ({t[2][0]})",
                    (lambda a=t[0][1], b=t[2][1], op=t[1]: (a() & b()) if op == "and" else (a() | b())),
                )
            ),
            kids.map(lambda k: (f"not ({k[0]})", lambda a=k[1]: ~a())),
        ),
        max_leaves=5,
    )


def test_random_expressions_keep_what_polars_keeps(tmp_path_factory, jsonl):
    """Random trees of comparisons, in, isnull, len, and/or/not against polars' filter of the source
    (SQL's three-valued logic on both sides: a missing x is neither > 0 nor not > 0)."""
    from hypothesis import HealthCheck, given, settings

    src = pl.read_ndjson(jsonl)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(tree=_tree())
    def check(tree):
        expr, pred = tree
        out = str(tmp_path_factory.mktemp("hyp") / "out")
        want = src.filter(pred())["id"].to_list()
        if not want:
            return  # every row removed: an error, tested apart
        convert(jsonl, out, to="parquet", filter=expr, columns=["id"])
        assert pl.read_parquet(os.path.join(out, "*.parquet"))["id"].to_list() == want, expr

    check()


BOOLS = Schema((Field("flag", "fixed", "|b1"), Field("label", "fixed", "<i8"), Field("x", "fixed", "<f8")))


@pytest.mark.parametrize(
    "expr, want",
    [
        ("label == true", [True, False, False, True]),
        ("true == label", [True, False, False, True]),
        ("x != false", [True, False, True, False]),  # NaN compares false either way
        ("flag == 1", [True, False, True, False]),
        ("flag != 0.0", [True, False, True, False]),
        ("isnull(x) == 1", [False, True, False, False]),
        ("flag == true", [True, False, True, False]),
        ("flag in (2)", [False, False, False, False]),  # was every true row: 2 cast to a bool
        ("flag in (0, 0.5)", [False, True, False, True]),
        ("flag in (true)", [True, False, True, False]),
        ("label in (true, 3)", [True, False, True, True]),
    ],
)
def test_numbers_compare_with_booleans(expr, want):
    """The language promises numbers compare with booleans (true is 1): Arrow has no such kernel, so
    a `label == true` on an int column failed with pyarrow's 'no kernel matching input types'."""
    batch = Batch(
        {
            "flag": np.array([True, False, True, False]),
            "label": np.array([1, 2, 3, 1]),
            "x": np.array([1.0, np.nan, 3.0, 0.0]),
        }
    )
    assert Filter(expr).check(BOOLS).mask(batch).tolist() == want


@pytest.fixture(scope="module")
def late(tmp_path_factory) -> dict[str, str]:
    """Inputs whose last row changes the schema, past the first piece (4 MiB) that types are inferred
    from: a CSV column of numbers that turns to text, a JSON Lines key met only at the end."""
    d = tmp_path_factory.mktemp("late")
    rows = 400_000
    with open(d / "late.csv", "w", encoding="utf-8") as f:
        f.write("id,c\n" + "".join(f"{i},{i}\n" for i in range(rows)) + "-1,x\n")
    with open(d / "late.jsonl", "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"id": i, "c": i}) + "\n" for i in range(rows)))
        f.write(json.dumps({"id": -1, "c": "x", "lang": "en"}) + "\n")
    assert os.path.getsize(d / "late.csv") > 5 << 20
    return {"csv": str(d / "late.csv"), "jsonl": str(d / "late.jsonl")}


@pytest.mark.parametrize(
    "job, kind, expr, dedup",
    [
        ("convert", "csv", "c == 'x' or id < 3", None),
        ("convert", "jsonl", "c == 'x' or id < 3", None),
        ("convert", "jsonl", "lang == 'en' or id < 3", None),
        ("convert", "jsonl", "id < 3 or id == -1", "lang"),
        ("shard", "csv", "c == 'x' or id < 3", None),
        ("shard", "jsonl", "id < 3 or id == -1", "lang"),
    ],
)
def test_a_column_whose_type_widens_or_that_appears_late(tmp_path, late, job, kind, expr, dedup):
    """The filter and --dedup-columns were checked against the types of the first piece: a column of
    numbers that turns to text later ('c is a number'), or a JSON Lines key met late ('no column
    lang'), refused a valid command. The input is read once to settle its types, then written."""
    src = late[kind]
    out = str(tmp_path / "out")
    args = ["--dedup", "exact", "--dedup-columns", dedup] if dedup else []
    more = ["--num-shards", "2", "--workers", "2"] if job == "shard" else []
    r = lovecraft(job, src, "-o", out, "--to", "parquet", "--filter", expr, *args, *more, "-q")
    assert r.exit_code == 0, r.stderr
    got = pl.read_parquet(os.path.join(out, "*.parquet"))
    want = (
        pl.read_csv(src, infer_schema_length=None) if kind == "csv" else pl.read_ndjson(src, infer_schema_length=None)
    )
    want = want.with_columns(pl.col("c").cast(pl.String))
    if "lang" in want.columns:
        want = want.with_columns(pl.col("lang").fill_null(""))  # lovecraft's missing text
    keep = (pl.col("c") == "x") | (pl.col("id") < 3)
    if "lang" in expr:
        keep = (pl.col("lang") == "en") | (pl.col("id") < 3)
    elif dedup:
        keep = (pl.col("id") < 3) | (pl.col("id") == -1)
    want = want.filter(keep)
    if dedup:
        want = want.unique(subset=[dedup], maintain_order=True, keep="first")
    assert got.to_dicts() == want.to_dicts()
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_a_type_error_that_reading_on_does_not_lift(tmp_path, late):
    """Reading the input once changes nothing: the error stands, one line, exit 1, nothing written."""
    r = lovecraft("convert", late["csv"], "-o", str(tmp_path / "o"), "--to", "parquet", "--filter", "id == 'a'")
    assert (r.exit_code, r.stderr) == (
        1,
        "Error: --filter \"id == 'a'\": cannot compare a number with a string (column 'id' is a number) at position "
        "4; compare like with like (quote text)\n",
    )
    assert not os.path.exists(tmp_path / "o")


def test_errors_after_rows_were_removed_name_the_row_read(tmp_path):
    """With --filter or --dedup before it, a float16 overflow (and verify --against's difference)
    named the row's place among the rows kept ("row 41" for line 81) as if it were the file's
    row; it names the row read."""
    src = tmp_path / "ovf.jsonl"
    src.write_text(
        "".join(json.dumps({"id": i, "x": 1e6 if i == 80 else 1.0, "keep": i % 2}) + "\n" for i in range(100))
    )
    line = (
        f"Error: {src}, row 81, column 'x': value 1000000.0 overflows float16 (max 65504.0); scale the data, keep a "
        "wider type, or pass --on-overflow clip\n"
    )
    for cmd, extra in (("convert", []), ("shard", ["--num-shards", "2"])):
        r = lovecraft(cmd, str(src), "-o", str(tmp_path / cmd), "--to", "parquet", "--dtype", "float16",
                      "--filter", "keep == 0", "-q", *extra)  # fmt: skip
        assert (r.exit_code, r.stderr) == (1, line), cmd
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"text": "a", "x": 1}\n{"text": "a", "x": 1}\n{"text": "b", "x": 1e6}\n')
    r = lovecraft("convert", str(dup), "-o", str(tmp_path / "d"), "--to", "parquet", "--dtype", "float16",
                  "--dedup", "exact", "--dedup-columns", "text", "-q")  # fmt: skip
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {dup}, row 3, column 'x':"), r.stderr
    # verify --against: the source's row, not its place among those kept
    v = tmp_path / "v.jsonl"
    rows = [{"id": i, "t": f"x{i % 7}", "keep": i % 3} for i in range(40)]
    v.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "vf")
    assert lovecraft("convert", str(v), "-o", out, "--to", "memmap", "--filter", "keep != 1", "--dedup", "exact",
                     "--dedup-columns", "t", "-q").exit_code == 0  # fmt: skip
    rows[11]["id"] = 111  # the 7th row kept: x4 first met, its keep 2
    v.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = lovecraft("verify", out, "--against", str(v))
    assert r.exit_code == 1
    assert r.stdout.splitlines()[0] == f"{v}: row 12, column 'id': 111 in the source, 11 in the dataset (id.npy, row 7)"


def test_dates_and_times_compare_with_iso_text(tmp_path):
    """A timestamp, date or time column had no literal it could be compared with ("compare like
    with like" led nowhere): ISO 8601 text is parsed for the column's type, a zone's offset honoured,
    and the rows kept are polars' (a naive time against a zoned column is in the column's zone)."""
    import datetime as dt

    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 500
    base = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    stamps = [base + dt.timedelta(hours=7 * i) for i in range(n)]
    src = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({
            "id": pa.array(range(n)),
            "ts": pa.array(stamps, pa.timestamp("us", tz="Europe/Paris")),
            "naive": pa.array([s.replace(tzinfo=None) for s in stamps], pa.timestamp("ns")),
            "day": pa.array([s.date() for s in stamps], pa.date32()),
            "at": pa.array([s.time() for s in stamps], pa.time64("us")),
        }),
        src,
    )  # fmt: skip
    paris = dt.timezone(dt.timedelta(hours=1))  # Paris in winter (every case's bound is in winter)
    naive = [s.replace(tzinfo=None) for s in stamps]
    cases = {
        "ts >= '2020-02-01T00:00:00+01:00'": lambda i: stamps[i] >= dt.datetime(2020, 2, 1, tzinfo=paris),
        "ts < '2020-01-10'": lambda i: stamps[i] < dt.datetime(2020, 1, 10, tzinfo=paris),  # the column's zone
        "naive > '2020-03-01T06:00'": lambda i: naive[i] > dt.datetime(2020, 3, 1, 6),
        "day == '2020-01-31' or day > \"2020-04-01\"": lambda i: (
            stamps[i].date() == dt.date(2020, 1, 31) or stamps[i].date() > dt.date(2020, 4, 1)
        ),
        "at <= '06:00:00' and id > 10": lambda i: stamps[i].time() <= dt.time(6) and i > 10,
    }
    for k, (expr, keep) in enumerate(cases.items()):
        out = tmp_path / f"o{k}"
        r = lovecraft("convert", str(src), "-o", str(out), "--to", "parquet", "--filter", expr, "-q")
        assert r.exit_code == 0, (expr, r.stderr)
        got = pl.read_parquet(out / "data.parquet")["id"].to_list()
        assert got == [i for i in range(n) if keep(i)] and 0 < len(got) < n, expr
    for expr, msg in {
        "day > '2020-02-30'": "'2020-02-30' is not a date for column 'day' at position 7; write an ISO 8601 date, "
        "e.g. '2020-01-31'",
        "naive > '2020-01-01T00:00:00Z'": "'2020-01-01T00:00:00Z' is not a timestamp[ns] for column 'naive' at "
        "position 9; the column's times have no time zone: write the time without an offset",
        "day > 18000": "cannot compare a temporal with a number (column 'day' is a temporal) at position 5; write a "
        "date or time as quoted ISO 8601 text, e.g. ts > '2020-01-31' (isnull() tests a missing one)",
    }.items():
        r = lovecraft("convert", str(src), "-o", str(tmp_path / "bad"), "--to", "parquet", "--filter", expr, "-q")
        assert (r.exit_code, r.stderr) == (1, f"Error: --filter {expr!r}: {msg}\n")
