"""Property-based round trips: generated schemas and values through every output format.

The values include what breaks converters: NaN, +-inf, -0.0, subnormals, float extremes, integers
at int64's limits, empty strings, ``\r`` inside values, quotes and delimiters; CSV column types are
both fixed and inferred; and some examples are repeated past the reader's piece and batch sizes
(``max_memory="16MiB"``: 1 MiB batches and CSV pieces, 512 KiB text chunks), so values land on both
sides of every boundary. Floats are compared bit for bit (NaN by position), with values parsed
here from the source.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lovecraft_convert import convert
from tests.readback import manifest, read_back

DTYPES = [
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.bool_,
]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SMALL_BATCHES = "16MiB"  # the smallest budget: 1 MiB batches and CSV pieces, 512 KiB text chunks
BIG = 3 << 19  # bytes a "large" example is repeated to: 1.5 MiB, past the first piece and batch
I64 = np.iinfo(np.int64)
INT64_EDGES = [int(I64.min), int(I64.min) + 1, -1, 0, 1, int(I64.max) - 1, int(I64.max)]


def _special_floats(dt: np.dtype) -> list[float]:
    fi = np.finfo(dt)
    return [
        float("nan"),
        float("inf"),
        float("-inf"),
        -0.0,
        0.0,
        float(fi.max),
        -float(fi.max),
        float(fi.smallest_subnormal),
        -float(fi.smallest_subnormal),
        float(fi.smallest_normal),
    ]


def _elements(dt: np.dtype):
    if dt.kind == "f":
        width = dt.itemsize * 8
        return st.floats(width=width) | st.sampled_from(_special_floats(dt))  # NaN and inf included
    if dt == np.int64:
        return st.integers(int(I64.min), int(I64.max)) | st.sampled_from(INT64_EDGES)
    return None  # hypothesis's own, over the whole range of the dtype


@st.composite
def npy_columns(draw):
    rows = draw(st.integers(1, 40))
    ncols = draw(st.integers(1, 3))
    cols = {}
    for i in range(ncols):
        dt = np.dtype(draw(st.sampled_from(DTYPES)))
        shape = (rows, *draw(st.lists(st.integers(1, 3), max_size=2)))
        cols[f"c{i}"] = draw(hnp.arrays(dt, shape, elements=_elements(dt)))
    if draw(st.integers(0, 4)) == 0:  # now and then, repeat the rows past a 1 MiB batch
        reps = BIG // (rows * 128) + 1
        cols = {k: np.concatenate([a] * reps) for k, a in cols.items()}
        # with a 128-byte column beside them, so that 1.5 MiB is some 12,000 rows, not millions
        seed = draw(st.integers(0, 2**32 - 1))
        cols["wide"] = np.random.default_rng(seed).standard_normal((rows * reps, 16))
    return cols


def _tfrecord_values(want: np.ndarray) -> np.ndarray:
    """What TFRecord holds of ``want``: float64 exact (a bytes value), float16/float32 as float32
    (float_list), integers and bools as int64 (int64_list)."""
    if want.dtype.kind == "f":
        return want if want.dtype.itemsize == 8 else want.astype(np.float32)
    return want.astype(np.int64)


def _assert_same_values(got, want) -> None:
    """Bit for bit for floats (so -0.0 is not 0.0), NaN compared by position; exact otherwise."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = f"u{want.dtype.itemsize}"
    np.testing.assert_array_equal(got.view(bits)[~nan], want.view(bits)[~nan])


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord", "webdataset"])
@SETTINGS
@given(cols=npy_columns())
def test_npy_roundtrip(tmp_path_factory, fmt, cols):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    d = tmp_path_factory.mktemp("p")
    paths = []
    for name, a in cols.items():
        np.save(d / f"{name}.npy", a)
        paths.append(str(d / f"{name}.npy"))
    convert(paths, str(d / "out"), to=fmt, progress=False, max_memory=SMALL_BATCHES)
    got = read_back(str(d / "out"), fmt, {name: ("fixed", a.dtype, a.shape[1:]) for name, a in cols.items()})
    for name, a in cols.items():
        want = _tfrecord_values(a) if fmt == "tfrecord" else a
        _assert_same_values(got[name], want)


# --------------------------------------------------------------------------------------------
# CSV: fixed column types, and types inferred from the values
# --------------------------------------------------------------------------------------------

# any character but surrogates and NUL, with the ones that matter to CSV and text readers boosted
AWKWARD = st.sampled_from(["\r", "\n", '"', ",", "\t", " ", "\ufeff", "é", "🙂"])
text_cell = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00") | AWKWARD, max_size=12
)


def _csv_field(s: str) -> str:
    # RFC 4180: quote a field holding a delimiter, a quote, \r or \n (Python's csv.writer with
    # lineterminator="\n" leaves a lone \r unquoted, which every reader takes for a line break)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\r\n') else s


def _csv_bytes(header: list[str], rows: list[list[str]], newline: str = "\n") -> bytes:
    lines = [",".join(map(_csv_field, r)) if r != [""] else '""' for r in [header, *rows]]
    return "".join(line + newline for line in lines).encode("utf-8")


def _parse_csv(data: bytes) -> list[list[str]]:
    """The source parsed with Python's csv module: the independent reference."""
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))[1:]


def _repeat_past(rows: list, nbytes: int, big: bool, filler=None) -> list:
    """The rows, repeated to ``BIG`` bytes (of CSV ``nbytes`` per copy) when ``big``; at most some
    20,000 rows: when ``filler(k, n)`` gives a row with ``n`` bytes of text, each copy ends with one."""
    if not big:
        return rows
    copies = BIG // max(1, nbytes) + 1
    if filler is None or copies * len(rows) <= 20_000:
        return rows * copies
    copies = max(1, 20_000 // len(rows))
    fill = max(0, BIG // copies - nbytes)
    return [row for k in range(copies) for row in (*rows, filler(k, fill))]


@pytest.mark.parametrize("fmt", ["hdf5", "parquet", "tfrecord"])
@SETTINGS
@given(
    rows=st.lists(
        st.tuples(
            st.integers(int(I64.min), int(I64.max)) | st.sampled_from(INT64_EDGES),
            st.floats(width=64) | st.sampled_from(_special_floats(np.dtype(np.float64))),
            text_cell,
        ),
        min_size=1,
        max_size=30,
    ),
    big=st.integers(0, 4).map(lambda k: k == 0),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_csv_roundtrip_strings(tmp_path_factory, fmt, rows, big, newline):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    d = tmp_path_factory.mktemp("c")
    cells = [[str(i), repr(f), s] for i, f, s in rows]
    data = _csv_bytes(["i", "f", "s"], cells, newline)
    data = _csv_bytes(
        ["i", "f", "s"], _repeat_past(cells, len(data), big, lambda k, n: [str(k), "0.5", "f" * n]), newline
    )
    (d / "d.csv").write_bytes(data)
    convert(
        [str(d / "d.csv")],
        str(d / "out"),
        to=fmt,
        progress=False,
        max_memory=SMALL_BATCHES,
        column_types={"i": "int64", "f": "float64", "s": "string"},
    )
    src = _parse_csv(data)
    tf_cols = {"i": ("fixed", np.int64, ()), "f": ("fixed", np.float64, ()), "s": ("string", None, ())}
    got = read_back(str(d / "out"), fmt, tf_cols)
    assert np.asarray(got["i"]).tolist() == [int(r[0]) for r in src]
    want_f = np.array([float(r[1]) for r in src])
    _assert_same_values(got["f"], want_f)  # float64 exact in every format, TFRecord too
    assert list(got["s"]) == [r[2] for r in src]


# inferred columns: each kind's cells are what a writer of that kind puts in a CSV
def _int_cell():
    return (st.integers(int(I64.min), int(I64.max)) | st.sampled_from(INT64_EDGES)).map(str)


def _float_cell():
    return (st.floats(width=64) | st.sampled_from(_special_floats(np.dtype(np.float64)))).map(repr)


def _bool_cell():
    return st.sampled_from(["true", "false"])


def _string_cell():
    return st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00") | AWKWARD, max_size=10
    )


CELLS = {"int": _int_cell, "int_with_empty": _int_cell, "float": _float_cell, "bool": _bool_cell, "str": _string_cell}


@st.composite
def inferred_table(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(CELLS)), min_size=1, max_size=4))
    nrows = draw(st.integers(1, 25))
    columns = []
    for kind in kinds:
        col = draw(st.lists(CELLS[kind](), min_size=nrows, max_size=nrows))
        # an empty field makes an int column float64 (NaN there); it needs another row, and another
        # column (alone on its line it would be a blank line, or, quoted, the empty string)
        if kind == "int_with_empty" and nrows > 1 and len(kinds) > 1:
            col[draw(st.integers(0, nrows - 1))] = ""
        if kind == "str":  # one value that no number or bool parses: the column stays text
            col[draw(st.integers(0, nrows - 1))] = "x" + draw(_string_cell())
        columns.append(col)
    return kinds, [list(r) for r in zip(*columns, strict=True)]


def _expected_column(kind: str, cells: list[str], fmt: str):
    """(manifest kind, dtype) the values call for, and the values, from the cells parsed here."""
    if kind == "int" or (kind == "int_with_empty" and all(cells)):
        return ("fixed", "<i8"), np.array([int(c) for c in cells], dtype=np.int64)
    if kind == "int_with_empty" and any(abs(int(c)) > 2**53 for c in cells if c):
        return ("string", "|u1"), cells  # float64 (NaN for the empty one) would round them: text, exact
    if kind in ("float", "int_with_empty"):
        vals = np.array([float(c) if c else float("nan") for c in cells])
        return ("fixed", "<f8"), vals
    if kind == "bool":
        return ("fixed", "|b1"), np.array([c == "true" for c in cells])
    return ("string", "|u1"), cells


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord", "webdataset"])
@FEW
@given(table=inferred_table(), big=st.integers(0, 3).map(lambda k: k == 0), newline=st.sampled_from(["\n", "\r\n"]))
def test_csv_types_are_inferred_from_the_values(tmp_path_factory, fmt, table, big, newline):
    """No --column-type: int64 for integers (to its limits), float64 for floats (nan, inf, -0.0)
    and for integers with an empty field (text when one is past 2**53, which float64 would round),
    bool for true/false, string otherwise."""
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    kinds, rows = table
    names = [f"{k}{i}" for i, k in enumerate(kinds)]
    d = tmp_path_factory.mktemp("inf")
    data = _csv_bytes(names, rows, newline)
    fillers = {"int": "7", "int_with_empty": "7", "float": "0.5", "bool": "true"}
    filler = (lambda k, n: [fillers.get(kind) or "x" + "f" * n for kind in kinds]) if "str" in kinds else None
    data = _csv_bytes(names, _repeat_past(rows, len(data), big, filler), newline)
    (d / "d.csv").write_bytes(data)
    src = _parse_csv(data)
    columns = None
    if fmt == "memmap":  # numbers only
        columns = [n for n, k in zip(names, kinds, strict=True) if k != "str"]
        if not columns:
            return
    convert([str(d / "d.csv")], str(d / "out"), to=fmt, progress=False, max_memory=SMALL_BATCHES, columns=columns)
    schema = {f["name"]: (f["kind"], f["dtype"]) for f in manifest(str(d / "out"))["schema"]}
    expected = {}
    for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        if columns is None or name in columns:
            expected[name] = _expected_column(kind, [r[i] for r in src], fmt)
    assert schema == {name: t for name, (t, _) in expected.items()}
    tf_cols = {n: (t[0], np.dtype(t[1]) if t[0] == "fixed" else None, ()) for n, (t, _) in expected.items()}
    got = read_back(str(d / "out"), fmt, tf_cols)
    for name, ((kind, _), want) in expected.items():
        if kind == "string":
            assert list(got[name]) == want, name
            continue
        if fmt == "tfrecord":
            want = _tfrecord_values(want)
        _assert_same_values(got[name], want)


# --------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------

line_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")
    | AWKWARD.filter(lambda c: c != "\n"),
    max_size=30,
)


@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
@FEW
@given(
    lines=st.lists(line_text, min_size=1, max_size=40),
    crlf=st.booleans(),
    big=st.integers(0, 3).map(lambda k: k == 0),
)
def test_text_roundtrip(tmp_path_factory, fmt, lines, crlf, big):
    """Lines with a \\r inside (a \\r ending a line is its CRLF), empty lines, any Unicode, through
    every format; some inputs past the 512 KiB chunk and 1 MiB batch."""
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    lines = [line.rstrip("\r") for line in lines]
    if fmt == "hdf5":  # HDF5 strings cannot hold NUL: refused with its own message (tests/corpus)
        lines = [line.replace("\x00", "") for line in lines]
    d = tmp_path_factory.mktemp("t")
    nl = "\r\n" if crlf else "\n"
    if big:  # ~20,000 lines of ~1.5 MiB: copies of the drawn lines, each followed by a long line
        copies = max(1, 20_000 // len(lines))
        fill = max(0, BIG // copies - len((nl.join(lines) + nl).encode()))
        lines = [line for k in range(copies) for line in (*lines, f"{k}:" + "f" * fill)]
    data = (nl.join(lines) + nl).encode("utf-8")
    (d / "t.txt").write_bytes(data)
    # the lines as Python splits them (a BOM at the very start is not part of the text)
    want = data.decode("utf-8").removeprefix("\ufeff").split(nl)[:-1]
    convert([str(d / "t.txt")], str(d / "out"), to=fmt, progress=False, max_memory=SMALL_BATCHES)
    got = read_back(str(d / "out"), fmt, {"text": ("string", None, ())})
    assert list(got["text"]) == want
