"""A wide CSV of one numeric type (a feature matrix) is parsed a piece at a time as one column of
rows x columns values (CsvReader._parse_uniform). Whatever the piece boundaries, line endings,
empty values or rows that do not fit, it must read exactly what the column-by-column parse reads,
and give the same errors; checked against Python's ``csv`` module and against the reader with the
fast path turned off."""

from __future__ import annotations

import contextlib
import csv
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lovecraft_convert.inputs import open_reader
from lovecraft_convert.inputs.base import SchemaChanged
from lovecraft_convert.inputs.csv import CsvReader
from lovecraft_convert.schema import WIDE_COLUMNS, VarColumn
from tests.conftest import lovecraft

WIDTH = WIDE_COLUMNS + 6


def _matrix(batches, names) -> np.ndarray:
    cols = {n: [] for n in names}
    for b in batches:
        for n in names:
            cols[n].append(np.asarray(b.columns[n]))
    return np.stack([np.concatenate(cols[n]) for n in names], axis=1)


def _read_all(path, piece: int | None = None, fast: bool = True, **kw):
    """The reader of ``path`` in pieces of ``piece`` bytes (``fast`` False: the one-column parse
    turned off) and all its batches."""
    with _one_column_turned_off(not fast):
        reader = open_reader([str(path)], budget=16 << 20, **kw)
        reader.options.piece_bytes = piece
        while True:  # a value that widens a column starts the read over, as the pipeline does
            try:
                return reader, list(reader.batches())
            except SchemaChanged:
                continue


@contextlib.contextmanager
def _one_column_turned_off(off: bool = True):
    """The reader (in this process) without the one-column parse and type inference."""
    keep = CsvReader._uniform_type, CsvReader._infer_uniform
    if off:
        CsvReader._uniform_type = lambda self: None
        CsvReader._infer_uniform = lambda self, body, spec: None
    try:
        yield
    finally:
        CsvReader._uniform_type, CsvReader._infer_uniform = keep


def _read(path, piece: int | None = None, fast: bool = True, **kw):
    reader, batches = _read_all(path, piece, fast, **kw)
    return reader, _matrix(batches, reader.schema.names)


def _python(text: str) -> np.ndarray:
    rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r][1:]
    return np.array([[float(v) if v != "" else np.nan for v in r] for r in rows])


def _write(path, rows: list[list[str]], newline: str = "\n", last_newline: bool = True) -> str:
    lines = [",".join(f"c{i}" for i in range(len(rows[0])))] + [",".join(r) for r in rows]
    text = newline.join(lines) + (newline if last_newline else "")
    path.write_bytes(text.encode())
    return text


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("piece", [None, 300, 4096])
def test_a_wide_float_matrix_reads_exactly(tmp_path, newline, piece):
    rng = np.random.default_rng(3)
    values = rng.normal(size=(500, WIDTH)) * 10.0 ** rng.integers(-5, 6, size=(500, WIDTH))
    rows = [[repr(float(x)) for x in r] for r in values]
    rows[7][3] = ""  # empty: NaN, as in a narrow table
    text = _write(tmp_path / "w.csv", rows, newline, last_newline=piece != 300)
    reader, got = _read(tmp_path / "w.csv", piece)
    assert reader._uniform_type() is not None
    want = _python(text)
    assert got.dtype == np.float64 and np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got[7, 3]) and np.array_equal(got[:7], values[:7])


def test_uniform_parse_is_taken_and_agrees_with_the_column_parse(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    rows = [[str(int(x)) for x in r] for r in rng.integers(-(10**12), 10**12, size=(300, WIDTH))]
    _write(tmp_path / "i.csv", rows)
    calls = []
    real = CsvReader._parse_uniform

    def spy(self, piece, spec, t):
        out = real(self, piece, spec, t)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(CsvReader, "_parse_uniform", spy)
    _, fast = _read(tmp_path / "i.csv", 2000)
    assert calls and all(calls)  # every piece went the one-column way
    _, slow = _read(tmp_path / "i.csv", 2000, fast=False)
    assert fast.dtype == np.int64 and np.array_equal(fast, slow)
    assert np.array_equal(fast, np.array(rows, dtype=np.int64))


def test_later_values_still_widen_the_columns(tmp_path):
    """An int matrix with a float, and one with an empty value, in a later piece: the column is
    widened to float64 as for any CSV (the piece falls back to the column parse); a word in a
    float column makes it a string column."""
    rows = [[str(i * WIDTH + j) for j in range(WIDTH)] for i in range(400)]
    rows[350][5] = "2.5"
    rows[360][9] = ""
    text = _write(tmp_path / "w.csv", rows)
    reader, got = _read(tmp_path / "w.csv", 1000)
    types = {f.name: f.dtype for f in reader.schema}
    assert types["c5"] == "<f8" and types["c9"] == "<f8" and types["c0"] == "<i8"
    assert np.array_equal(got, _python(text), equal_nan=True)
    rows = [[f"{i}.5" for _ in range(WIDTH)] for i in range(400)]
    rows[370][11] = "abc"
    _write(tmp_path / "s.csv", rows)
    reader, batches = _read_all(tmp_path / "s.csv", 1000)
    kinds = {f.name: f.kind for f in reader.schema}
    assert kinds["c11"] == "string" and kinds["c10"] == "fixed"
    col = VarColumn.concat([b.columns["c11"] for b in batches])
    assert bytes(col.values[col.offsets[370] : col.offsets[371]]) == b"abc"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            "short",
            "row 301 (line 302): expected {w} fields, found {n}; fix the row (is a quote unbalanced or a delimiter missing?)",
        ),
        (
            "long",
            "row 301 (line 302): expected {w} fields, found {n}; fix the row (is a quote unbalanced or a delimiter missing?)",
        ),
    ],
)
def test_a_bad_row_in_a_later_piece_gives_the_usual_error(tmp_path, bad, message):
    rows = [[f"{i}.5" for _ in range(WIDTH)] for i in range(400)]
    if bad == "short":
        rows[300] = rows[300][:-1]
    else:
        rows[300] = rows[300] + ["1"]
    _write(tmp_path / "w.csv", rows)
    out = tmp_path / "o"
    r = lovecraft("convert", str(tmp_path / "w.csv"), "-o", str(out), "--to", "memmap", "--max-memory", "16MiB", "-q")
    assert (
        r.exit_code == 1
        and r.stderr == f"Error: {tmp_path / 'w.csv'}, " + message.format(w=WIDTH, n=len(rows[300])) + "\n"
    )
    assert (r.exit_code, r.stderr) == _slow_error(tmp_path)  # word for word the column parse's error
    assert not out.exists()


def _slow_error(tmp_path) -> tuple[int, str]:
    """The exit code and message with the one-column parse turned off (in this process)."""
    with _one_column_turned_off():
        r = lovecraft(
            "convert",
            str(tmp_path / "w.csv"),
            "-o",
            str(tmp_path / "o2"),
            "--to",
            "memmap",
            "--max-memory",
            "16MiB",
            "-q",
        )
    return r.exit_code, r.stderr


def test_blank_lines_and_tabs(tmp_path):
    """A blank line inside the matrix, and a tab-separated matrix: the same values."""
    rows = [[f"{i + j / 8}" for j in range(WIDTH)] for i in range(200)]
    text = _write(tmp_path / "w.csv", rows).replace(f"\n{rows[100][0]},", f"\n\n{rows[100][0]},", 1)
    (tmp_path / "w.csv").write_text(text)
    _, got = _read(tmp_path / "w.csv", 700)
    assert np.array_equal(got, _python(text))
    tsv = text.replace(",", "\t")
    (tmp_path / "w.tsv").write_text(tsv)
    _, got = _read(tmp_path / "w.tsv", 700, delimiter="\t")
    assert np.array_equal(got, _python(text))


@st.composite
def matrices(draw):
    """A matrix of one kind of value, drawn from a seed (drawing thousands of cells one by one is
    slow): ints across int64, or floats of every magnitude with some empty cells and some ints."""
    width = draw(st.integers(WIDE_COLUMNS, WIDE_COLUMNS + 20))
    nrows = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    if draw(st.sampled_from(["int", "float"])) == "int":
        rows = [[str(int(x)) for x in r] for r in rng.integers(-(2**62), 2**62, size=(nrows, width))]
    else:
        v = rng.normal(size=(nrows, width)) * 10.0 ** rng.integers(-300, 300, size=(nrows, width))
        rows = [[repr(float(x)) for x in r] for r in v]
        for _ in range(draw(st.integers(0, 5))):
            rows[rng.integers(nrows)][rng.integers(width)] = draw(st.sampled_from(["", "7", "-0.0", "1e308", "5E-324"]))
    return rows, draw(st.sampled_from(["\n", "\r\n"])), draw(st.booleans())


@given(m=matrices(), piece=st.integers(64, 5000))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_generated_matrices_match_the_column_parse(tmp_path, m, piece):
    rows, newline, last = m
    path = tmp_path / "g.csv"
    _write(path, rows, newline, last)
    fast, slow = _columns(path, piece, True), _columns(path, piece, False)
    assert fast.keys() == slow.keys()
    for name, (kind, values) in fast.items():
        assert kind == slow[name][0]
        if isinstance(values, list):  # a column of only empty values so far is read as text
            assert values == slow[name][1]
        else:
            assert values.dtype == slow[name][1].dtype and np.array_equal(values, slow[name][1], equal_nan=True)


def _columns(path, piece: int, fast: bool) -> dict:
    reader, batches = _read_all(path, piece, fast)
    out = {}
    for f in reader.schema:
        cols = [b.columns[f.name] for b in batches]
        if isinstance(cols[0], VarColumn):
            c = VarColumn.concat(cols)
            out[f.name] = (
                f.kind,
                [bytes(c.values[c.offsets[i] : c.offsets[i + 1]]) for i in range(len(c.offsets) - 1)],
            )
        else:
            out[f.name] = (f.kind, np.concatenate(cols))
    return out


def _probe_spy(monkeypatch) -> list:
    """What each probe's one-column inference answered (None: column by column)."""
    answers = []
    real = CsvReader._infer_uniform

    def spy(self, body, spec):
        answers.append(real(self, body, spec))
        return answers[-1]

    monkeypatch.setattr(CsvReader, "_infer_uniform", spy)
    return answers


@pytest.mark.parametrize(
    ("column", "inferred", "c3"),
    [
        (None, "double", "<f8"),  # a float matrix: float64 for all, from one column
        ("ints", None, "<i8"),  # one column of integers alone: int64, column by column
        ("integral", None, "<f8"),  # 1.0, 2.0: float64, but only the column parse can tell
        ("nan", "double", "<f8"),  # nan and inf are not integers
        ("empty", None, "<f8"),  # an empty value: column by column (a column of them is text)
    ],
)
def test_types_inferred_from_one_column_are_the_column_by_column_types(tmp_path, monkeypatch, column, inferred, c3):
    rows = [[f"{i}.{j + 1}" for j in range(WIDTH)] for i in range(50)]
    for i, r in enumerate(rows):
        r[3] = {"ints": str(i), "integral": f"{i}.0", "nan": ["nan", "inf", "-inf", "1.5"][i % 4], "empty": ""}.get(
            column, r[3]
        )
    if column == "empty":
        rows[0][3] = "2.5"
    text = _write(tmp_path / "w.csv", rows)
    answers = _probe_spy(monkeypatch)
    reader, got = _read(tmp_path / "w.csv")
    assert [str(a) if a is not None else None for a in answers[:1]] == [inferred]
    types = {f.name: f.dtype for f in reader.schema}
    assert types["c3"] == c3 and types["c0"] == "<f8" and len(types) == WIDTH
    _, slow = _read(tmp_path / "w.csv", fast=False)
    assert {f.name: f.dtype for f in _read_all(tmp_path / "w.csv", fast=False)[0].schema} == types
    assert np.array_equal(got, slow, equal_nan=True) and np.array_equal(got, _python(text), equal_nan=True)


def test_an_int_matrix_is_int64_from_one_column(tmp_path, monkeypatch):
    rows = [[str(i * WIDTH - j) for j in range(WIDTH)] for i in range(40)]
    _write(tmp_path / "i.csv", rows)
    answers = _probe_spy(monkeypatch)
    reader, got = _read(tmp_path / "i.csv")
    assert str(answers[0]) == "int64" and {f.dtype for f in reader.schema} == {"<i8"}
    assert np.array_equal(got, np.array(rows, dtype=np.int64))


@pytest.mark.parametrize(
    "header",
    ['c0,"c,1",c2', "c0 , c1,\tc2", 'c0,"c""1",c2', "c0,c1,", "c0,c1,c2\r"],
)
def test_header_names_as_pyarrow_reads_them(tmp_path, header):
    """Names split at the delimiter where the header has no quotes, else parsed by pyarrow: the
    same names, spaces and all."""
    import pyarrow as pa
    import pyarrow.csv as pc

    want = pc.read_csv(pa.py_buffer(header.encode() + b"\n")).schema.names
    text = header + "\n" + ",".join(["1.5"] * len(want)) + "\n"
    (tmp_path / "h.csv").write_text(text, newline="")
    # a field with no name (a trailing delimiter) is named as --no-header names it, f<i>
    want = [n or f"f{i}" for i, n in enumerate(want)]
    assert open_reader([str(tmp_path / "h.csv")], budget=16 << 20).schema.names == want


@st.composite
def mixed_matrices(draw):
    """A wide matrix whose columns each hold one kind of text: integers, integral floats written
    with a point, floats, floats with some integers, nan/inf, or some empty values."""
    width = draw(st.integers(WIDE_COLUMNS, WIDE_COLUMNS + 8))
    nrows = draw(st.integers(1, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    kinds = draw(st.lists(st.sampled_from(["float"] * 6 + ["int", "point", "some-int", "nan", "empty"]), min_size=1))
    cells = {
        "float": lambda: repr(float(rng.normal() * 10.0 ** rng.integers(-20, 20))),
        "int": lambda: str(int(rng.integers(-(2**62), 2**62))),
        "point": lambda: f"{int(rng.integers(-1000, 1000))}.0",
        "some-int": lambda: str(int(rng.integers(-9, 9))) if rng.random() < 0.5 else f"{rng.random():.3f}",
        "nan": lambda: ["nan", "inf", "-inf", "NaN", "0.25"][int(rng.integers(5))],
        "empty": lambda: "" if rng.random() < 0.3 else "1.5",
    }
    col_kinds = [kinds[j % len(kinds)] for j in range(width)]
    return [[cells[k]() for k in col_kinds] for _ in range(nrows)]


@given(rows=mixed_matrices())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_generated_types_match_the_column_by_column_inference(tmp_path, rows):
    path = tmp_path / "t.csv"
    _write(path, rows)
    fast, slow = _columns(path, 1 << 20, True), _columns(path, 1 << 20, False)
    assert {n: (k, v.dtype if not isinstance(v, list) else None) for n, (k, v) in fast.items()} == {
        n: (k, v.dtype if not isinstance(v, list) else None) for n, (k, v) in slow.items()
    }
    for name, (_, values) in fast.items():
        if isinstance(values, list):
            assert values == slow[name][1]
        else:
            assert np.array_equal(values, slow[name][1], equal_nan=True)
