"""Tables too wide to read column by column (issue 38, point 11). A 1,000,000-column CSV header was
refused only after a 766 MiB peak; ``--stack-columns`` (the fix the refusal suggests) and
``inspect`` died the same way; a 900,000-key JSON Lines line (8 MB) peaked at 977 MiB; and
``--stack-columns`` was quadratic in the columns (20,000 columns 7 s, 40,000 28 s). Now a header is
counted as bytes and refused past MAX_COLUMNS in one line naming the fix; with ``--stack-columns``
the table is read as one matrix whose stacked columns are slices of it; a JSON line's keys are
counted before it is parsed; and stacking looks columns up by name in constant time."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from lovecraft_convert.inputs.csvwide import count_fields
from lovecraft_convert.schema import FIXED, MAX_COLUMNS, Field, Schema
from lovecraft_convert.transforms.stack import Stack
from tests.conftest import SHARED, SUBPROCESS_ENV, leftovers, lovecraft, memcapped
from tests.readback import READERS, manifest

MEMCAP = os.path.join(SHARED, "tools", "memcap")
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
N = MAX_COLUMNS + 20_000  # wider than the limit, small enough to convert in-process


def _wide(path, n: int, rows: np.ndarray, names=None, fmt: str = "%d") -> str:
    names = names or [f"c{i}" for i in range(n)]
    with open(path, "w") as f:
        f.write(",".join(names) + "\n")
        np.savetxt(f, rows, fmt=fmt, delimiter=",")
    return str(path)


def _too_wide(src: str, n: int, what: str = "the header has {n} columns", first: str = "c0", last: str = "c") -> str:
    return (
        f"Error: {src}: {what.format(n=n)}, more than {MAX_COLUMNS} (each column costs memory before any row is "
        f"read); convert or shard it with --stack-columns NAME=FIRST:LAST (e.g. x={first}:{last}{n - 1} for every "
        "column), which reads the table as one matrix of numbers\n"
    )


def test_fields_are_counted_outside_quotes():
    assert count_fields(b"a,b,c", ",") == 3
    assert count_fields(b'a,"b,c",d', ",") == 3
    assert count_fields(b"", ",") == 1


def test_a_header_past_the_limit_is_refused_as_it_is_counted(tmp_path):
    src = _wide(tmp_path / "w.csv", N, np.ones((2, N), dtype=np.int64))
    for args in (["convert", src, "-o", str(tmp_path / "out"), "--to", "parquet"], ["inspect", src]):
        r = lovecraft(*args)
        assert (r.exit_code, r.stderr) == (1, _too_wide(src, N))
    assert leftovers(tmp_path) == []


def test_a_table_past_the_limit_without_a_header(tmp_path):
    """Read with --no-header, it was refused as a "header" whatever --stack-columns said; its
    columns are f0, f1, ... (or --column-names), as for any CSV without a header."""
    rng = np.random.default_rng(2)
    x = rng.integers(-5, 5, size=(3, N))
    src = str(tmp_path / "w.csv")
    with open(src, "w") as f:
        np.savetxt(f, x, fmt="%d", delimiter=",")
    r = lovecraft("convert", src, "-o", str(tmp_path / "o1"), "--to", "memmap", "--no-header")
    assert (r.exit_code, r.stderr) == (1, _too_wide(src, N, "the first row has {n} fields", "f0", "f"))
    out = str(tmp_path / "out")
    r = lovecraft(
        "convert", src, "-o", out, "--to", "memmap", "-q", "--no-header",
        "--stack-columns", "a=f0:f9", "--stack-columns", f"b=f10:f{N - 1}",
    )  # fmt: skip
    assert (r.exit_code, r.stderr) == (0, "")
    np.testing.assert_array_equal(np.load(os.path.join(out, "a.npy")), x[:, :10])
    np.testing.assert_array_equal(np.load(os.path.join(out, "b.npy")), x[:, 10:])
    r = lovecraft(
        "convert",
        src,
        "-o",
        str(tmp_path / "o2"),
        "--to",
        "memmap",
        "--column-names",
        "a,b",
        "--stack-columns",
        "x=a:b",
    )
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: --column-names gives 2 names, the first row has {N} fields; give one name per column\n",
    )


@pytest.mark.parametrize("to", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_stack_columns_reads_a_table_past_the_limit_as_one_matrix(tmp_path, to):
    rng = np.random.default_rng(0)
    x = rng.integers(-1000, 1000, size=(5, N))
    src = _wide(tmp_path / "w.csv", N, x)
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", to, "--stack-columns", f"x=c0:c{N - 1}", "-q")
    assert (r.exit_code, r.stderr) == (0, "")
    got = np.asarray(READERS[to](out)["x"])
    np.testing.assert_array_equal(got, x)


def test_several_stacks_and_columns_left_as_they_are(tmp_path):
    rng = np.random.default_rng(1)
    n = N + 2
    x = rng.normal(size=(4, n))
    names = ["id", *[f"a{i}" for i in range(N // 2)], "label", *[f"b{i}" for i in range(N - N // 2)]]
    src = _wide(tmp_path / "w.csv", n, x, names, fmt="%.17g")
    out = str(tmp_path / "out")
    r = lovecraft(
        "convert", src, "-o", out, "--to", "memmap", "-q",
        "--stack-columns", f"a=a0:a{N // 2 - 1}", "--stack-columns", "b=b*",
    )  # fmt: skip
    assert (r.exit_code, r.stderr) == (0, "")
    m = manifest(out)
    assert [f["name"] for f in m["schema"]] == ["id", "a", "label", "b"]
    np.testing.assert_array_equal(np.load(os.path.join(out, "id.npy")), x[:, 0])
    np.testing.assert_array_equal(np.load(os.path.join(out, "a.npy")), x[:, 1 : 1 + N // 2])
    np.testing.assert_array_equal(np.load(os.path.join(out, "label.npy")), x[:, 1 + N // 2])
    np.testing.assert_array_equal(np.load(os.path.join(out, "b.npy")), x[:, 2 + N // 2 :])


def test_a_float_in_a_later_piece_widens_the_matrix(tmp_path):
    x = np.ones((40, N), dtype=np.float64)
    src = str(tmp_path / "w.csv")
    with open(src, "w") as f:
        f.write(",".join(f"c{i}" for i in range(N)) + "\n")
        np.savetxt(f, x[:39], fmt="%d", delimiter=",")
        f.write(",".join(["1"] * (N - 1) + ["2.5"]) + "\n")
    x[39, -1] = 2.5
    out = str(tmp_path / "out")
    r = lovecraft("convert", src, "-o", out, "--to", "memmap", "-q", "--stack-columns", f"x=c0:c{N - 1}")
    assert (r.exit_code, r.stderr) == (0, "")
    got = np.load(os.path.join(out, "x.npy"))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize(
    "last,message",
    [
        (["1"] * (N - 1) + ["abc"], "Error: {src}, row 3, column 'c{last}': 'abc' is not a number; the columns of a table wider than {max} are read as one matrix of numbers: fix the value\n"),
        (["1"] * (N - 1), "Error: {src}, row 3: {fields} fields in a table of {n} columns; every row must have the header's number of fields\n"),
    ],
)  # fmt: skip
def test_a_bad_row_of_the_matrix_is_one_line(tmp_path, last, message):
    src = str(tmp_path / "w.csv")
    with open(src, "w") as f:
        f.write(",".join(f"c{i}" for i in range(N)) + "\n")
        f.write(",".join(["1"] * N) + "\n")
        f.write(",".join(["1"] * N) + "\n")
        f.write(",".join(last) + "\n")
    r = lovecraft("convert", src, "-o", str(tmp_path / "out"), "--to", "memmap", "--stack-columns", f"x=c0:c{N - 1}")
    assert (r.exit_code, r.stderr) == (
        1,
        message.format(src=src, last=N - 1, max=MAX_COLUMNS, fields=len(last), n=N),
    )


class _Counted(str):
    """A column name that counts how often it is compared."""

    compared = 0

    def __eq__(self, other):
        _Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_stacking_looks_columns_up_in_constant_time():
    """Was: each member looked up by a scan of the schema (20,000 columns 7 s, 40,000 28 s)."""
    n = 20_000
    schema = Schema(tuple(Field(_Counted(f"c{i}"), FIXED, "<f4") for i in range(n)))
    _Counted.compared = 0
    stack = Stack(schema, [f"x=c0:c{n - 1}"], "t.csv")
    assert stack.schema.names == ["x"]
    assert _Counted.compared < 10 * n  # (a scan per member: ~n**2 / 2 = 200,000,000)


def test_a_json_line_of_too_many_keys_is_refused_before_it_is_parsed(tmp_path):
    src = tmp_path / "keys.jsonl"
    keys = ",".join(f'"k{i}":0' for i in range(MAX_COLUMNS + 1))
    src.write_text('{"a": 1}\n{"s": "a:b:c", ' + keys + "}\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "out"), "--to", "parquet")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, line 2: a record of more than {MAX_COLUMNS} keys (each key is a column); split the "
        "record, or keep such data in one key (a list of numbers becomes one column)\n",
    )


def test_colons_inside_strings_are_not_keys(tmp_path):
    src = tmp_path / "colons.jsonl"
    src.write_text('{"a": "' + ":" * (MAX_COLUMNS + 5) + '", "b": 1}\n')
    out = str(tmp_path / "out")
    assert lovecraft("convert", str(src), "-o", out, "--to", "parquet", "-q").exit_code == 0


def test_keys_past_the_limit_over_many_lines_are_refused(tmp_path):
    src = tmp_path / "many.jsonl"
    per = 1000
    with open(src, "w") as f:
        for line in range(MAX_COLUMNS // per + 1):
            f.write("{" + ",".join(f'"k{line * per + i}":0' for i in range(per)) + "}\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "out"), "--to", "parquet")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}, line {MAX_COLUMNS // per + 1}, key 'k{MAX_COLUMNS}': a key beyond the first {MAX_COLUMNS} "
        "of the input (each key is a column); keep such data in fewer keys, or select keys with --columns\n",
    )


# -- under the cap: the sizes ---------------------------------------------------------


@pytest.fixture(scope="module")
def memcap() -> str:
    if not os.access(MEMCAP, os.X_OK):
        pytest.skip(f"{MEMCAP} not found")
    return MEMCAP


def _capped(memcap, *cmd) -> tuple:
    r, peak = memcapped(memcap, 512, [LOVECRAFT, *cmd], env=SUBPROCESS_ENV, timeout=1800)
    if r.returncode == 3:
        pytest.skip("memcap cannot make a memory cgroup here")
    return r, peak


@pytest.mark.slow
def test_a_million_columns_under_a_512_mib_cap(memcap, tmp_path):
    n = 1_000_000
    x = np.arange(3 * n, dtype=np.int64).reshape(3, n) % 97
    src = _wide(tmp_path / "w.csv", n, x)
    out = str(tmp_path / "out")
    for cmd in (["convert", src, "-o", out, "--to", "parquet", "--max-memory", "256MiB"], ["inspect", src]):
        r, peak = _capped(memcap, *cmd)
        print(f"\n1,000,000 columns, {cmd[0]} refused: peak {peak} MiB (was 766 MiB)")
        assert (r.returncode, r.stderr.splitlines()[0] + "\n") == (1, _too_wide(src, n))
        assert peak < 200
    r, peak = _capped(memcap, "convert", src, "-o", out, "--to", "memmap", "--max-memory", "256MiB", "-q",
                      "--stack-columns", f"x=c0:c{n - 1}")  # fmt: skip
    print(f"1,000,000 columns stacked: rc {r.returncode}, peak {peak} MiB (was killed)")
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_array_equal(np.load(os.path.join(out, "x.npy")), x)


@pytest.mark.slow
def test_a_900000_key_json_line_under_a_512_mib_cap(memcap, tmp_path):
    src = tmp_path / "keys.jsonl"
    with open(src, "w") as f:
        f.write('{"a": 1}\n{' + ",".join(f'"{i:x}":0' for i in range(900_000)) + "}\n")
    r, peak = _capped(
        memcap, "convert", str(src), "-o", str(tmp_path / "out"), "--to", "parquet", "--max-memory", "512MiB"
    )
    print(f"\n900,000 keys ({os.path.getsize(src)} bytes): rc {r.returncode}, peak {peak} MiB (was 977 MiB)")
    assert r.returncode == 1 and "line 2: a record of more than 100000 keys" in r.stderr
    assert peak < 150
