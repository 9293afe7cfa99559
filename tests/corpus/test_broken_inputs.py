"""A corpus of broken (and merely awkward) inputs, made here byte by byte.

Each case runs ``lovecraft convert`` (and, where it reads the same input, ``lovecraft inspect``)
and asserts the exact one-line message and exit code, or, for inputs that must convert, the rows
read back; in every case nothing is left at the output path on failure and no temporaries remain.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import zstandard

from tests.conftest import leftovers, lovecraft
from tests.readback import manifest, read_back

# --------------------------------------------------------------------------------------------
# input makers: each writes its files into directory d and returns the input paths
# --------------------------------------------------------------------------------------------


def _npy(a, **kw) -> bytes:
    b = io.BytesIO()
    np.save(b, a, **kw)
    return b.getvalue()


def _file(name: str, data: bytes) -> Callable[[str], list[str]]:
    def make(d: str) -> list[str]:
        p = os.path.join(d, name)
        with open(p, "wb") as f:
            f.write(data)
        return [p]

    return make


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def _big_csv_then_string() -> bytes:
    """Column ``b`` is an integer for well over a megabyte, then holds a word on row 300,001."""
    rows = 300_000
    body = "".join(f"{i},{i * 7}\n" for i in range(rows)).encode()
    assert len(body) > 2 << 20
    return b"a,b\n" + body + b"300000,oops\n" + b"300001,5\n"


def _npy_header(descr: str, shape: tuple, data: bytes = b"") -> bytes:
    """A hand-made NPY 1.0 file (header padded to 64 bytes) holding ``data``."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}".encode()
    pad = 64 - (10 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + data


CSV = b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 2) for i in range(2000))
TEXT = b"".join(b"line %d\n" % i for i in range(5000))
GZ = gzip.compress(CSV, mtime=0)
ZST = zstandard.ZstdCompressor(write_checksum=True).compress(TEXT)
BZ2 = bz2.compress(CSV)
XZ = lzma.compress(CSV)
OBJ = _npy(np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
STRUCT = _npy(np.array([(1, 2.0), (3, 4.0)], dtype=[("i", "<i4"), ("f", "<f8")]))
F32 = _npy(np.arange(100, dtype=np.float32))
JGZ = gzip.compress(b"".join(b'{"a": %d, "b": "%x"}\n' % (i, i * 7919) for i in range(5000)), mtime=0)


def _bomb(d: str) -> list[str]:
    """80 MB of zeros in a .npy.gz of about 80 KB (made lazily: it takes a moment)."""
    p = os.path.join(d, "z.npy.gz")
    with gzip.open(p, "wb", compresslevel=1) as f:
        f.write(_npy_header("<f8", (10_000_000,)))
        zeros = bytes(8 << 20)
        for _ in range(10_000_000 * 8 // len(zeros)):
            f.write(zeros)
        f.write(bytes(10_000_000 * 8 % len(zeros)))
    return [p]


def _bomb_in(kind: str, body: str = "npy") -> Callable[[str], list[str]]:
    """80 MB in a few KB of zstd, xz or bz2 (streamed, fast presets): a .npy of zeros, or CSV rows."""

    def make(d: str) -> list[str]:
        p = os.path.join(d, f"z.{body}.{kind}")
        opener = {
            "zst": lambda: zstandard.open(p, "wb", cctx=zstandard.ZstdCompressor(level=1, write_checksum=True)),
            "xz": lambda: lzma.open(p, "wb", preset=0),  # noqa: SIM115
            "bz2": lambda: bz2.open(p, "wb", compresslevel=1),  # noqa: SIM115
        }[kind]
        with opener() as f:
            if body == "npy":
                f.write(_npy_header("<f8", (10_000_000,)))
                block = bytes(8 << 20)
            else:
                f.write(b"a,b\n")
                block = b"1,2\n" * (2 << 20)
            for _ in range(10):
                f.write(block)
        return [p]

    return make


def _bad_unicode() -> bytes:
    """A ``<U2`` array whose last code unit is 0x110000, beyond Unicode."""
    b = bytearray(_npy(np.array(["ab", "cd"])))
    b[-4:] = (0x110000).to_bytes(4, "little")
    return bytes(b)


def _directory(d: str) -> list[str]:
    p = os.path.join(d, "adir")
    os.mkdir(p)
    with open(os.path.join(p, "inside.csv"), "wb") as f:
        f.write(CSV)
    return [p]


# --------------------------------------------------------------------------------------------
# the corpus
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    make: Callable[[str], list[str]]
    to: str
    expect: str | None  # the exact stderr line ({d}: the directory of the inputs); None: must convert
    output_opts: list[str] = field(default_factory=list)  # convert only (--dtype, --max-memory, ...)
    input_opts: list[str] = field(default_factory=list)  # convert and inspect
    check: Callable[[str, dict], None] | None = None  # after a conversion: (output, columns read back)
    # inspect reads the same input through the same readers: True, the same message (or success);
    # a string, its own message; a callable, a check of its --json report; False, not run
    inspect: bool | str | Callable[[dict], None] = True


def _check_bom(out: str, cols: dict) -> None:
    assert [f["name"] for f in manifest(out)["schema"]] == ["id", "v"]
    assert list(np.asarray(cols["id"])) == [1, 2] and list(np.asarray(cols["v"])) == [3.5, 4.5]


def _check_crlf(out: str, cols: dict) -> None:
    assert list(cols["name"]) == ["x", "y z", "w\r\nv"]  # no stray \r; a quoted CRLF is kept
    assert list(np.asarray(cols["n"])) == [1, 2, 3]


def _check_widened(out: str, cols: dict) -> None:
    m = manifest(out)
    assert {f["name"]: f["kind"] for f in m["schema"]} == {"a": "fixed", "b": "string"}
    assert m["rows"] == 300_002
    b = cols["b"]
    assert (b[0], b[1], b[299_999], b[300_000], b[300_001]) == ("0", "7", "2099993", "oops", "5")


def _inspect_widened(report: dict) -> None:
    cols = {c["name"]: c for c in report["columns"]}
    assert report["rows"] == 300_002 and report["rows_exact"]
    assert cols["b"]["kind"] == "string" and cols["a"]["dtype"] == "int64"


def _check_inch(out: str, cols: dict) -> None:
    assert list(cols["size"]) == ['5"', "7"]


def _check_stray_then_quoted(out: str, cols: dict) -> None:
    assert list(cols["a"]) == ["x", "1"] and list(cols["b"]) == ['y"z', "open\n2,3"]


def _check_slash(out: str, cols: dict) -> None:
    assert list(np.asarray(cols["a/b"])) == [1]


def _check_escaped(out: str, cols: dict) -> None:
    """A column name that is a path leaving the output names an escaped file inside it."""
    assert list(np.asarray(cols["../../evil"])) == [1]
    assert sorted(os.listdir(out)) == ["_manifest.json", "b.npy", "~%2E%2E%2F%2E%2E%2Fevil.npy"]


def _check_nul(out: str, cols: dict) -> None:
    assert list(cols["text"]) == ["one", "tw\x00o", "three"]


def _check_blank_csv(out: str, cols: dict) -> None:
    assert list(np.asarray(cols["a"])) == [1, 3, 5]


def _check_blank_text(out: str, cols: dict) -> None:
    assert list(cols["text"]) == ["one", "", "two", "", "", "three"]


def _check_huge_line(out: str, cols: dict) -> None:
    lines = list(cols["text"])
    assert [len(x) for x in lines] == [1, 20 << 20, 1] and lines[1] == "x" * (20 << 20)


def _check_replaced(out: str, cols: dict) -> None:
    assert list(cols["name"]) == ["ok", "b\ufffdd", "x"]


def _cannot_hold(*fmts: str) -> Callable[[dict], None]:
    """inspect succeeds and says exactly these formats cannot hold the input (no size estimate)."""

    def check(report: dict) -> None:
        est = report["estimated_bytes"]
        assert est.pop("megatron") is None  # it holds token sequences only: none of these inputs
        assert sorted(k for k, v in est.items() if v is None) == sorted(fmts), est

    return check


def _overflow_reported(n: int, column: str) -> Callable[[dict], None]:
    def check(report: dict) -> None:
        c = next(c for c in report["columns"] if c["name"] == column)
        assert c["float16"]["overflow"] == n

    return check


def _check_jsonl_blank(out: str, cols: dict) -> None:
    assert list(np.asarray(cols["a"])) == [1, 2, 3]


def _check_jsonl_dup(out: str, cols: dict) -> None:
    assert list(np.asarray(cols["a"])) == [2, 3] and list(cols["b"]) == ["x", "y"]


def _check_jsonl_big_int(out: str, cols: dict) -> None:
    assert list(cols["id"]) == ["1", str(2**64), "-3"]


def _check_jsonl_values(out: str, cols: dict) -> None:
    assert [list(v) for v in cols["value"]] == [[1.0, 2.0], [], [3.5]]


def _check_jsonl_late(out: str, cols: dict) -> None:
    m = manifest(out)
    assert {f["name"]: (f["kind"], f["dtype"]) for f in m["schema"]} == {
        "a": ("fixed", "<f8"), "s": ("string", "|u1"), "late": ("fixed", "<f8")}  # fmt: skip
    assert m["rows"] == 100_002
    assert np.isnan(cols["a"][100_000]) and cols["a"][100_001] == 2.5 and list(cols["s"])[100_001] == "7"
    assert np.isnan(cols["late"][0]) and cols["late"][100_001] == 1.0


def _jsonl_late_widening() -> bytes:
    """Integers and words for 3 MB; then a null, a float, a number among the words and a new key."""
    body = b"".join(b'{"a": %d, "s": "w%d"}\n' % (i, i) for i in range(100_000))
    return body + b'{"a": null, "s": "x"}\n{"a": 2.5, "s": 7, "late": true}\n'


HUGE_LINE = b"a\n" + b"x" * (20 << 20) + b"\nc\n"
NOT_CLOSED = "a quoted field opened here is never closed (unterminated quote); fix the quoting (a quote inside a quoted field is written twice)"
RENAME = "rename the column in the input (a CSV: its header, or read it with --no-header), or write memmap, parquet or tfrecord"
RAGGED = "fix the row (is a quote unbalanced or a delimiter missing?)"
F16 = "overflows float16 (max 65504.0); scale the data, keep a wider type, or pass --on-overflow clip"
REDOWNLOAD = "re-create or re-download the file"
EOS = "(Compressed file ended before the end-of-stream marker was reached)"

CASES: dict[str, Case] = {
    # ---- CSV structure ----
    "csv ragged row": Case(_file("r.csv", b"a,b,c\n1,2,3\n4,5,6\n7,8\n9,10,11\n"), "parquet", f"Error: {{d}}/r.csv, row 3 (line 4): expected 3 fields, found 2; {RAGGED}"),
    "csv row with an extra field": Case(_file("m.csv", b"a,b\n1,2\n3,4,5\n"), "hdf5", f"Error: {{d}}/m.csv, row 2 (line 3): expected 2 fields, found 3; {RAGGED}"),
    "csv whitespace-only line": Case(_file("ws.csv", b"a,b\n1,2\n \n3,4\n"), "tfrecord", f"Error: {{d}}/ws.csv, row 2 (line 3): expected 2 fields, found 1; {RAGGED}"),
    "csv unterminated quote": Case(_file("q.csv", b'a,b\n1,2\n3,"x\n4,y\n5,z\n'), "hdf5", f"Error: {{d}}/q.csv, line 3: {NOT_CLOSED}"),
    "csv unterminated quote in the header": Case(_file("qh.csv", b'"a,b\n1,2\n'), "memmap", f"Error: {{d}}/qh.csv, line 1: {NOT_CLOSED}"),
    "csv unterminated quote after a stray quote": Case(_file("s1.csv", b'a,b\nx,y"z\n1,"open\n2,3\n'), "parquet", f"Error: {{d}}/s1.csv, line 3: {NOT_CLOSED}"),
    "csv unterminated quote after two stray quotes": Case(_file("s2.csv", b'a,b\n5\'10",y"z\n1,"open\n2,3\n'), "tfrecord", f"Error: {{d}}/s2.csv, line 3: {NOT_CLOSED}"),
    "csv quoted newline after a stray quote": Case(_file("s3.csv", b'a,b\nx,y"z\n1,"open\n2,3"\n'), "memmap", None, check=_check_stray_then_quoted),
    "csv --skip-rows past the end": Case(_file("sk.csv", b"meta\na,b\n"), "hdf5", "Error: {d}/sk.csv: --skip-rows 5 skips past the end of the input (it has 2 lines); check --skip-rows", input_opts=["--skip-rows", "5"]),
    "csv only comments": Case(_file("oc.csv", b'# "a\n# b\n'), "parquet", "Error: {d}/oc.csv: empty input (no header, no rows); check the file", input_opts=["--comment", "#"]),
    "csv stray quote inside a field is a literal": Case(_file("inch.csv", b'a,size\n1,5"\n2,7\n'), "parquet", None, input_opts=["--column-type", "size=string"], check=_check_inch),
    "csv duplicate column name": Case(_file("dup.csv", b"a,b,a\n1,2,3\n"), "parquet", "Error: {d}/dup.csv: column name 'a' appears twice in the header; rename one of them, or name the columns with --column-names A,B,... --skip-rows 1"),
    "csv header only": Case(_file("h.csv", b"a,b,c\n"), "tfrecord", "Error: {d}/h.csv: no data rows (header only); check the file"),
    "csv header only with a bom": Case(_file("hb.csv", b"\xef\xbb\xbfa,b\n"), "parquet", "Error: {d}/hb.csv: no data rows (header only); check the file"),
    "csv empty": Case(_file("e.csv", b""), "memmap", "Error: {d}/e.csv: empty input (no header, no rows); check the file"),
    "csv only blank lines": Case(_file("nl.csv", b"\n\n\n"), "hdf5", "Error: {d}/nl.csv: empty input (no header, no rows); check the file"),
    "csv blank lines are skipped": Case(_file("bl.csv", b"a,b\n1,2\n\n3,4\n\n\n5,6\n"), "parquet", None, check=_check_blank_csv),
    "csv utf-8 bom": Case(_file("bom.csv", b"\xef\xbb\xbfid,v\n1,3.5\n2,4.5\n"), "hdf5", None, check=_check_bom),
    "csv crlf": Case(_file("crlf.csv", b'n,name\r\n1,x\r\n2,"y z"\r\n3,"w\r\nv"\r\n'), "tfrecord", None, check=_check_crlf),
    "csv invalid utf-8": Case(_file("u.csv", b"a,name\n1,ok\n2,b\xffd\n3,x\n"), "parquet", "Error: {d}/u.csv, row 2 (line 3), column 'name': invalid UTF-8; fix the file or pass --errors replace"),
    "csv invalid utf-8 after 2 MB": Case(_file("u2.csv", b"a,name\n" + b"".join(b"%d,name%d\n" % (i, i) for i in range(200_000)) + b"7,b\xffd\n"), "hdf5", "Error: {d}/u2.csv, row 200001 (line 200002), column 'name': invalid UTF-8; fix the file or pass --errors replace"),
    "csv invalid utf-8, --errors replace": Case(_file("ur.csv", b"a,name\n1,ok\n2,b\xffd\n3,x\n"), "parquet", None, input_opts=["--errors", "replace"], check=_check_replaced),
    "csv int then string after 2 MB is widened": Case(_file("w.csv", _big_csv_then_string()), "parquet", None, check=_check_widened, inspect=_inspect_widened),
    "csv int then string after 2 MB, --column-type": Case(_file("w.csv", _big_csv_then_string()), "memmap", "Error: {d}/w.csv, row 300001 (line 300002), column 'b': 'oops' is not a valid int64; fix the value or choose another --column-type", input_opts=["--column-type", "b=int64"]),
    "csv header not utf-8": Case(_file("hu.csv", b"id,n\xe9me\n1,2\n"), "parquet", "Error: {d}/hu.csv, line 1 (the header): invalid UTF-8 (invalid continuation byte at byte 5 of the line); fix the file or pass --errors replace"),
    "csv column name escaping the output (memmap)": Case(_file("ev.csv", b"../../evil,b\n1,2\n"), "memmap", None, check=_check_escaped, inspect=_cannot_hold("hdf5")),
    "csv column name '.' (hdf5)": Case(_file("em.csv", b".,a\n0,1\n1,2\n"), "hdf5", f"Error: {{d}}/em.csv, column '.': cannot be the name of an HDF5 dataset (empty, '.', '..', or holding '/' or NUL); {RENAME}", inspect=_cannot_hold("hdf5")),
    "csv column name with a slash (hdf5)": Case(_file("sl.csv", b"a/b,c\n1,2\n"), "hdf5", f"Error: {{d}}/sl.csv, column 'a/b': cannot be the name of an HDF5 dataset (empty, '.', '..', or holding '/' or NUL); {RENAME}", inspect=_cannot_hold("hdf5")),
    "csv column name with a slash (parquet)": Case(_file("sl.csv", b"a/b,c\n1,2\n"), "parquet", None, check=_check_slash),
    "csv float16 overflow": Case(_file("f.csv", b"x,y\n1.5,2\n1e6,3\n"), "hdf5", f"Error: {{d}}/f.csv, row 2, column 'x': value 1000000.0 {F16}", output_opts=["--dtype", "float16"], inspect=_overflow_reported(1, "x")),
    # ---- text ----
    "text empty": Case(_file("e.txt", b""), "parquet", "Error: {d}/e.txt: empty input (no lines); check the file"),
    "text only a bom": Case(_file("b.txt", b"\xef\xbb\xbf"), "hdf5", "Error: {d}/b.txt: empty input (no lines); check the file"),
    "text blank lines are records": Case(_file("bl.txt", b"one\n\ntwo\n\n\nthree\n"), "parquet", None, check=_check_blank_text),
    "text invalid utf-8": Case(_file("b.txt", b"fine\nalso fine\nbad \xc3\x28 here\n"), "tfrecord", "Error: {d}/b.txt, line 3: invalid UTF-8 (invalid continuation byte at byte 5 of the line); fix the file or pass --errors replace"),
    "text with a NUL character (hdf5)": Case(_file("nul.txt", b"one\ntw\x00o\nthree\n"), "hdf5", "Error: column 'text', row 2: holds a NUL character, which HDF5 strings cannot store; remove it from the input, or write parquet, tfrecord or memmap", inspect=_cannot_hold("hdf5")),
    "text with a NUL character (parquet)": Case(_file("nul.txt", b"one\ntw\x00o\nthree\n"), "parquet", None, check=_check_nul),
    "text 20 MB line, --max-memory 16MiB": Case(_file("huge.txt", HUGE_LINE), "parquet", "Error: {d}/huge.txt, line 2: line longer than 1048576 bytes; raise --max-memory or split the line", output_opts=["--max-memory", "16MiB"], inspect=False),
    "text 20 MB line, --max-memory 512MiB": Case(_file("huge.txt", HUGE_LINE), "memmap", None, output_opts=["--max-memory", "512MiB"], check=_check_huge_line, inspect=False),
    # ---- JSON Lines ----
    "jsonl broken line": Case(_file("b.jsonl", b'{"a": 1}\n{"a": \n{"a": 3}\n'), "parquet", "Error: {d}/b.jsonl, line 2: not valid JSON (Expecting value at character 7); fix the line"),
    "jsonl broken line after 3 MB": Case(_file("b3.jsonl", _jsonl_late_widening() + b'{"a": 1,}\n'), "hdf5", "Error: {d}/b3.jsonl, line 100003: not valid JSON (Expecting property name enclosed in double quotes at character 9); fix the line"),
    "jsonl two objects on a line": Case(_file("two.jsonl", b'{"a": 1}\n{"a": 2} {"a": 3}\n'), "tfrecord", "Error: {d}/two.jsonl, line 2: not valid JSON (Extra data at character 10); fix the line"),
    "jsonl a line that is not an object": Case(_file("arr.jsonl", b'{"a": 1}\n[1, 2]\n'), "memmap", "Error: {d}/arr.jsonl, line 2: an array, not an object: each line of a JSON Lines input holds one object; fix the line (an input where no line holds an object is read as one column 'value')"),
    "jsonl no line is an object": Case(_file("v.jsonl", b"[1, 2]\n[]\n[3.5]\n"), "parquet", None, check=_check_jsonl_values),
    "jsonl NaN": Case(_file("nan.jsonl", b'{"a": 1.5}\n{"a": NaN}\n'), "hdf5", "Error: {d}/nan.jsonl, line 2, key 'a': NaN is not JSON (RFC 8259 has no NaN or Infinity); write null for a missing value"),
    "jsonl -Infinity": Case(_file("inf.jsonl", b'{"a": -Infinity}\n'), "parquet", "Error: {d}/inf.jsonl, line 1, key 'a': -Infinity is not JSON (RFC 8259 has no NaN or Infinity); write null for a missing value"),
    "jsonl invalid utf-8": Case(_file("u.jsonl", b'{"a": "ok"}\n{"a": "b\xffd"}\n'), "tfrecord", "Error: {d}/u.jsonl, line 2: invalid UTF-8 (invalid start byte at byte 9 of the line); fix the file or pass --errors replace"),
    "jsonl lone surrogate escape": Case(_file("s.jsonl", b'{"a": "\\udc00"}\n'), "parquet", "Error: {d}/s.jsonl, line 1, key 'a': a \\u escape names a lone surrogate (half of a character), which is not text; fix the file or pass --errors replace"),
    "jsonl duplicate keys: the last wins": Case(_file("dup.jsonl", b'{"a": 1, "b": "x", "a": 2}\n{"a": 3, "b": "y"}\n'), "hdf5", None, check=_check_jsonl_dup),
    "jsonl integers beyond int64 are kept as text": Case(_file("big.jsonl", b'{"id": 1}\n{"id": 18446744073709551616}\n{"id": -3}\n'), "parquet", None, check=_check_jsonl_big_int),
    "jsonl integers beyond 2**53 with a null": Case(_file("bn.jsonl", b'{"id": 9007199254740993}\n{"id": null}\n'), "hdf5", "Error: {d}/bn.jsonl, line 2, key 'id': integers beyond +-2**53 and null values (or missing keys): float64, which would hold the nulls as NaN, cannot hold those integers exactly; pass --column-type id=string to keep them as text"),
    "jsonl list of objects": Case(_file("lo.jsonl", b'{"a": [{"b": 1}]}\n'), "parquet", "Error: {d}/lo.jsonl, line 1, key 'a': a list of objects: only lists of numbers, of strings or of booleans become columns; leave the key out with --columns"),
    "jsonl list of objects left out": Case(_file("lo.jsonl", b'{"a": [{"b": 1}], "c": 1}\n'), "hdf5", None, input_opts=["--columns", "c"]),
    "jsonl an object, then a number": Case(_file("on.jsonl", b'{"m": {"k": 1}}\n{"m": 5}\n'), "tfrecord", "Error: {d}/on.jsonl, line 2, key 'm': a number, where earlier lines hold an object; give the key one shape, or leave it out with --columns"),
    "jsonl lists of strings (hdf5)": Case(_file("ls.jsonl", b'{"t": ["a", "b"], "n": 1}\n'), "hdf5", "Error: {d}/ls.jsonl, column 't': hdf5 cannot hold list<string> columns; leave the column out with --columns, or write a format that holds it", inspect=_cannot_hold("memmap", "hdf5", "tfrecord")),
    "jsonl --column-type overflow": Case(_file("ct.jsonl", b'{"a": 1}\n{"a": 300}\n'), "parquet", "Error: {d}/ct.jsonl, line 2, key 'a': 300 does not fit int8; fix the value or choose another --column-type", input_opts=["--column-type", "a=int8"]),
    "jsonl blank lines, crlf and a bom": Case(_file("bl.jsonl", b'\xef\xbb\xbf{"a": 1}\r\n\r\n  \n{"a": 2}\r\n{"a": 3}'), "memmap", None, check=_check_jsonl_blank),
    "jsonl types widened after 3 MB": Case(_file("late.jsonl", _jsonl_late_widening()), "hdf5", None, check=_check_jsonl_late),
    "jsonl empty": Case(_file("e.jsonl", b""), "parquet", "Error: {d}/e.jsonl: empty input (no records); check the file"),
    "jsonl only empty objects": Case(_file("eo.jsonl", b"{}\n{}\n"), "tfrecord", "Error: {d}/eo.jsonl: no record has a key (every line is {{}}); there is nothing to convert"),
    "jsonl one JSON array over many lines": Case(_file("doc.jsonl", b'[\n  {"a": 1}\n]\n'), "parquet", "Error: {d}/doc.jsonl, line 1: not valid JSON (Expecting value at character 2); this looks like a JSON array, not JSON Lines: pass --input-format json (or name the file .json)"),
    "jsonl one JSON object over many lines": Case(_file("obj.jsonl", b'{\n  "a": 1\n}\n'), "parquet", "Error: {d}/obj.jsonl, line 1: not valid JSON (Expecting property name enclosed in double quotes at character 2); this looks like one JSON document over many lines, not JSON Lines: write one object per line (e.g. jq -c '.[]')"),
    "jsonl 3 MB line, --max-memory 16MiB": Case(_file("huge.jsonl", b'{"a": "x"}\n{"a": "' + b"y" * (3 << 20) + b'"}\n'), "parquet", "Error: {d}/huge.jsonl, line 2: a line longer than 1048576 bytes; raise --max-memory (a line must fit in 1/32 of it)", output_opts=["--max-memory", "16MiB"], inspect=False),
    "jsonl.gz truncated": Case(_file("t.jsonl.gz", JGZ[: len(JGZ) // 2]), "hdf5", f"Error: {{d}}/t.jsonl.gz: truncated gzip stream after {len(JGZ) // 2} compressed bytes {EOS}; {REDOWNLOAD}"),
    # ---- npy ----
    "npy empty file": Case(_file("e.npy", b""), "memmap", "Error: {d}/e.npy: empty input (0 bytes, not a .npy file); check the file"),
    "npy zero rows": Case(_file("z.npy", _npy(np.zeros((0, 3), dtype=np.float32))), "parquet", "Error: {d}/z.npy: empty input (no records); check the file"),
    "npy not npy at all": Case(_file("x.npy", b"hello, this is not numpy\n"), "memmap", "Error: {d}/x.npy: not a .npy file (bad magic bytes); check the file or pass --input-format"),
    "npy unknown version": Case(_file("v.npy", b"\x93NUMPY\x09\x00" + F32[8:]), "hdf5", "Error: {d}/v.npy: unsupported .npy version 9.0; re-save it with numpy"),
    "npy malformed header": Case(_file("mh.npy", _npy_header("<f4", (4,), b"\0" * 16).replace(b"'shape'", b"'shope'")), "parquet", "Error: {d}/mh.npy: malformed .npy header (keys); re-create the file"),
    "npy 0-d array": Case(_file("s0.npy", _npy(np.float32(1.5))), "tfrecord", "Error: {d}/s0.npy: a 0-d array has no record axis; save it with at least one dimension"),
    "npy dtype that numpy cannot parse": Case(_file("descr.npy", _npy_header("(,)f4", (2,), bytes(8))), "memmap", "Error: {d}/descr.npy: .npy header has an invalid dtype '(,)f4'; re-create the file"),
    "npy strings that are not unicode": Case(_file("bad_u.npy", _bad_unicode()), "parquet", "Error: {d}/bad_u.npy, row 2: holds 0x110000, which is not a Unicode character; re-create the file with valid strings"),
    "npy truncated": Case(_file("t.npy", F32[:-7]), "hdf5", "Error: {d}/t.npy: truncated: header declares shape (100,) float32 (400 data bytes) but the file holds 393; re-create the file"),
    "npy truncated inside the header": Case(_file("th.npy", F32[:40]), "parquet", "Error: {d}/th.npy: truncated .npy header; re-create the file"),
    "npy trailing garbage": Case(_file("g.npy", F32 + b"garbage"), "tfrecord", "Error: {d}/g.npy: 7 bytes of trailing garbage after the declared data; re-create the file"),
    "npy object dtype": Case(_file("o.npy", OBJ), "parquet", "Error: {d}/o.npy: holds Python objects (dtype object); refusing to unpickle; save it with a numeric or fixed-width string dtype"),
    "npy structured dtype": Case(_file("s.npy", STRUCT), "memmap", "Error: {d}/s.npy: holds a structured dtype (fields i, f), which is not supported; save each field as its own .npy file (several .npy inputs become the columns of one dataset)"),
    "npy header claims a huge shape": Case(_file("huge.npy", _npy_header("<f8", (1 << 40,), b"\0" * 64)), "hdf5", "Error: {d}/huge.npy: truncated: header declares shape (1099511627776,) float64 (8796093022208 data bytes) but the file holds 64; re-create the file"),
    "npy.gz header claims a huge shape": Case(_file("huge.npy.gz", gzip.compress(_npy_header("<f8", (1 << 40,), b"\0" * 64), mtime=0)), "parquet", "Error: {d}/huge.npy.gz: truncated: data ends at row 9 of the 1099511627776 the header declares; re-create the file"),
    "npy float16 overflow": Case(_file("big.npy", _npy(np.array([[1.0, 2.0], [3.0, 1e9]], dtype=np.float64))), "tfrecord", f"Error: {{d}}/big.npy, row 2, column 'big': value 1000000000.0 {F16}", output_opts=["--dtype", "float16"], inspect=_overflow_reported(1, "big")),
    # ---- compression ----
    "gz truncated": Case(_file("t.csv.gz", GZ[: len(GZ) // 2]), "parquet", f"Error: {{d}}/t.csv.gz: truncated gzip stream after {len(GZ) // 2} compressed bytes {EOS}; {REDOWNLOAD}"),
    "gz corrupt": Case(_file("c.csv.gz", _flip(GZ, 30)), "hdf5", f"Error: {{d}}/c.csv.gz: corrupt gzip stream after {len(GZ)} compressed bytes (Error -3 while decompressing data: invalid bit length repeat); {REDOWNLOAD}"),
    "gz bad crc in the trailer": Case(_file("crc.csv.gz", _flip(GZ, len(GZ) - 6)), "tfrecord", f"Error: {{d}}/crc.csv.gz: corrupt gzip stream after {len(GZ)} compressed bytes (CRC check failed 0x{zlib.crc32(CSV) ^ 0xFF0000:08x} != 0x{zlib.crc32(CSV):08x}); {REDOWNLOAD}"),
    "gz named .gz but plain": Case(_file("p.csv.gz", CSV), "parquet", "Error: {d}/p.csv.gz: named .gz but is not gzip-compressed; rename it or re-create it"),
    "gz empty file": Case(_file("e.csv.gz", b""), "hdf5", "Error: {d}/e.csv.gz: empty input (no header, no rows); check the file"),
    "gz bomb beyond --max-expansion": Case(_bomb, "parquet", "Error: {d}/z.npy.gz: inflates more than 10x its compressed size (decompression bomb?); if the file is genuine, raise the limit with --max-expansion", input_opts=["--max-expansion", "10"]),
    "zst bomb beyond --max-expansion": Case(_bomb_in("zst"), "hdf5", "Error: {d}/z.npy.zst: inflates more than 10x its compressed size (decompression bomb?); if the file is genuine, raise the limit with --max-expansion", input_opts=["--max-expansion", "10"]),
    "xz bomb beyond --max-expansion": Case(_bomb_in("xz"), "tfrecord", "Error: {d}/z.npy.xz: inflates more than 10x its compressed size (decompression bomb?); if the file is genuine, raise the limit with --max-expansion", input_opts=["--max-expansion", "10"]),
    "bz2 bomb beyond --max-expansion": Case(_bomb_in("bz2"), "memmap", "Error: {d}/z.npy.bz2: inflates more than 10x its compressed size (decompression bomb?); if the file is genuine, raise the limit with --max-expansion", input_opts=["--max-expansion", "10"]),
    "csv.zst bomb beyond --max-expansion": Case(_bomb_in("zst", "csv"), "parquet", "Error: {d}/z.csv.zst: inflates more than 10x its compressed size (decompression bomb?); if the file is genuine, raise the limit with --max-expansion", input_opts=["--max-expansion", "10"]),
    "zst truncated": Case(_file("t.txt.zst", ZST[: len(ZST) // 2]), "memmap", f"Error: {{d}}/t.txt.zst: truncated zstd stream (ends inside a frame); {REDOWNLOAD}"),
    "zst corrupt": Case(_file("c.txt.zst", _flip(ZST, len(ZST) // 2)), "parquet", f"Error: {{d}}/c.txt.zst: corrupt zstd stream (Restored data doesn't match checksum); {REDOWNLOAD}"),
    "zst corrupt frame header": Case(_file("f.txt.zst", _flip(ZST, 4)), "hdf5", f"Error: {{d}}/f.txt.zst: corrupt zstd stream (Unsupported frame parameter); {REDOWNLOAD}"),
    "bz2 truncated": Case(_file("t.csv.bz2", BZ2[: len(BZ2) // 2]), "tfrecord", f"Error: {{d}}/t.csv.bz2: truncated bz2 stream after {len(BZ2) // 2} compressed bytes {EOS}; {REDOWNLOAD}"),
    "bz2 corrupt": Case(_file("c.csv.bz2", _flip(BZ2, len(BZ2) // 2)), "parquet", f"Error: {{d}}/c.csv.bz2: corrupt bz2 stream after {len(BZ2)} compressed bytes (Invalid data stream); {REDOWNLOAD}"),
    "xz truncated": Case(_file("t.csv.xz", XZ[: len(XZ) // 2]), "hdf5", f"Error: {{d}}/t.csv.xz: truncated xz stream after {len(XZ) // 2} compressed bytes {EOS}; {REDOWNLOAD}"),
    "xz corrupt": Case(_file("c.csv.xz", _flip(XZ, len(XZ) // 2)), "memmap", f"Error: {{d}}/c.csv.xz: corrupt xz stream after {len(XZ)} compressed bytes (Corrupt input data); {REDOWNLOAD}"),
    # ---- paths ----
    "directory as input": Case(_directory, "parquet", "Error: {d}/adir: is a directory, not a file; pass the files inside it, e.g. a glob like dir/*.csv, or --input-format files to read each file as a row", inspect="Error: {d}/adir: no _manifest.json; not a lovecraft dataset, or its writing did not finish; give the output directory of a completed `lovecraft convert`/`shard` run"),
    "glob matching nothing": Case(lambda d: [os.path.join(d, "nothing*.csv")], "tfrecord", "Error: {d}/nothing*.csv: no file matches this pattern; check the glob"),
}  # fmt: skip


def _run_case(tmp_path, c: Case, case: str) -> None:
    d = str(tmp_path)
    inputs = c.make(d)
    before = sorted(os.listdir(d))
    out = os.path.join(d, "out")
    r = lovecraft("convert", *inputs, "-o", out, "--to", c.to, *c.input_opts, *c.output_opts, "-q")
    if c.expect is None:
        assert (r.exit_code, r.stderr) == (0, ""), case
        if c.check:
            c.check(out, read_back(out, c.to))
    else:
        assert (r.exit_code, r.stderr) == (1, c.expect.format(d=d) + "\n"), case
        assert r.stdout == ""
        assert not os.path.exists(out)
    assert leftovers(d) == []
    assert sorted(n for n in os.listdir(d) if n != "out") == before  # nothing beside the output
    if c.inspect is False:
        return
    r = lovecraft("inspect", *inputs, *c.input_opts, "-q", "--json")
    if callable(c.inspect):
        assert r.exit_code == 0, r.stderr
        c.inspect(json.loads(r.stdout))
    elif c.expect is None:
        assert r.exit_code == 0, r.stderr
    else:
        want = c.inspect if isinstance(c.inspect, str) else c.expect
        assert (r.exit_code, r.stderr) == (1, want.format(d=d) + "\n"), case
        assert json.loads(r.stdout)["error"]["message"] == want.format(d=d).removeprefix("Error: "), case
    assert leftovers(d) == []


@pytest.mark.parametrize("case", list(CASES))
def test_broken_input(tmp_path, case):
    _run_case(tmp_path, CASES[case], case)


def test_corpus_is_large_and_mixes_formats():
    assert len(CASES) >= 30
    assert {c.to for c in CASES.values()} == {"memmap", "hdf5", "parquet", "tfrecord"}


# --------------------------------------------------------------------------------------------
# an input the user cannot read
# --------------------------------------------------------------------------------------------

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _without_dac_override() -> None:
    """In the child before exec: drop the capabilities that let root read any file (the exec'd
    program then runs as a root that file modes bind)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _cli(*args: str) -> subprocess.CompletedProcess:
    root = os.geteuid() == 0
    return subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", *args],
        capture_output=True,
        text=True,
        preexec_fn=_without_dac_override if root else None,
        timeout=120,
    )


@pytest.mark.parametrize("to", ["parquet", "memmap"])
def test_unreadable_file(tmp_path, to):
    d = str(tmp_path)
    src = os.path.join(d, "secret.csv")
    with open(src, "wb") as f:
        f.write(CSV)
    os.chmod(src, 0)
    try:  # can the child run at all without those capabilities?
        probe = _cli("--version")
    except (subprocess.SubprocessError, OSError) as e:  # prctl refused (no CAP_SETPCAP)
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE for a child here: {e}")
    if probe.returncode != 0:
        pytest.skip(f"cannot run the CLI without CAP_DAC_OVERRIDE here: {probe.stderr.strip()[-200:]}")
    check = subprocess.run(
        [sys.executable, "-c", f"open({src!r}, 'rb')"],
        capture_output=True,
        preexec_fn=_without_dac_override if os.geteuid() == 0 else None,
    )
    if check.returncode == 0:
        pytest.skip("a mode-000 file is still readable here (capabilities could not be dropped)")
    out = os.path.join(d, "out")
    want = f"Error: {src}: permission denied; check the file's permissions\n"
    r = _cli("convert", src, "-o", out, "--to", to, "-q")
    assert (r.returncode, r.stderr, r.stdout) == (1, want, "")
    assert not os.path.exists(out) and leftovers(d) == []
    r = _cli("inspect", src, "-q")
    assert (r.returncode, r.stderr, r.stdout) == (1, want, "")


# --------------------------------------------------------------------------------------------
# where the output goes
# --------------------------------------------------------------------------------------------


def _src(d: str) -> str:
    p = os.path.join(d, "a.csv")
    with open(p, "wb") as f:
        f.write(CSV)
    return p


OUTPUT_CASES = {
    # (output path relative to d, extra flags, expected stderr or None for success)
    "output is the input file": ("a.csv", [], "Error: {d}/a.csv: the output would replace the input {d}/a.csv; choose another output directory"),
    "output is the input file, --overwrite": ("a.csv", ["--overwrite"], "Error: {d}/a.csv: the output would replace the input {d}/a.csv; choose another output directory"),
    "output is the input's directory, --overwrite": (".", ["--overwrite"], "Error: {d}: the output would replace the input {d}/a.csv; choose another output directory"),
    "output under the input file": ("a.csv/out", [], "Error: {d}/a.csv/out: cannot create the output: {d}/a.csv is a file, not a directory; choose another output path"),
    "output exists (a non-empty directory)": ("taken", [], "Error: {d}/taken: output already exists; pass --overwrite to replace it or choose another path"),
    "output exists (a file), --overwrite": ("file.bin", ["--overwrite"], "Error: {d}/file.bin: exists and is not a directory; remove it or choose another path"),
    "output is a new directory beside the input": ("out", [], None),
    "output is a new nested directory beside the input": ("new/deeper/out", [], None),
    "output path with a trailing slash": ("out/", [], None),
}  # fmt: skip


@pytest.mark.parametrize("case", list(OUTPUT_CASES))
@pytest.mark.parametrize("to", ["hdf5", "tfrecord"])
def test_output_path(tmp_path, case, to):
    rel, flags, expect = OUTPUT_CASES[case]
    d = str(tmp_path)
    src = _src(d)
    os.mkdir(os.path.join(d, "taken"))
    with open(os.path.join(d, "taken", "keep.txt"), "w") as f:
        f.write("mine")
    with open(os.path.join(d, "file.bin"), "wb") as f:
        f.write(b"mine")
    before = {
        n: sorted(os.listdir(os.path.join(d, n))) if os.path.isdir(os.path.join(d, n)) else None for n in os.listdir(d)
    }
    out = os.path.normpath(os.path.join(d, rel)) + ("/" if rel.endswith("/") else "")
    r = lovecraft("convert", src, "-o", out, "--to", to, "-q", *flags)
    if expect is None:
        assert (r.exit_code, r.stderr) == (0, "")
        assert manifest(out)["rows"] == 2000
        assert read_back(out.rstrip("/"), to)["a"].tolist() == list(range(2000))
    else:
        assert (r.exit_code, r.stderr, r.stdout) == (1, expect.format(d=d) + "\n", "")
        now = {
            n: sorted(os.listdir(os.path.join(d, n))) if os.path.isdir(os.path.join(d, n)) else None
            for n in os.listdir(d)
        }
        assert now == before  # the input, the existing output and everything else untouched
        with open(src, "rb") as f:
            assert f.read() == CSV
    assert leftovers(d) == []
    for sub in ("taken", "new", "new/deeper"):
        if os.path.isdir(os.path.join(d, sub)):
            assert leftovers(os.path.join(d, sub)) == []


def test_a_file_named_as_another_kind_is_named_as_what_it_is(tmp_path):
    """A Parquet file named .csv was read as CSV ('invalid UTF-8 ...; pass --errors replace', which
    only turned its bytes into other errors); an NPY file named .parquet was 'damaged or not what
    its name says'. Its first bytes say what it is (found by an outside trial)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "p.csv")
    np.save(tmp_path / "n.npy", np.arange(3))
    os.rename(tmp_path / "n.npy", tmp_path / "n.parquet")
    (tmp_path / "t.csv").write_text("PAR1,x\n1,2\n")  # a CSV whose first field is PAR1: a CSV
    r = lovecraft("inspect", str(tmp_path / "p.csv"))
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path / 'p.csv'}: named .csv, but it is a Parquet file (its first bytes); pass --input-format "
        "parquet, or rename it\n",
    )
    r = lovecraft("convert", str(tmp_path / "n.parquet"), "-o", str(tmp_path / "o"), "--to", "memmap")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path / 'n.parquet'}: named .parquet, but it is an NPY file (its first bytes); pass "
        "--input-format npy, or rename it\n",
    )
    assert lovecraft("inspect", str(tmp_path / "p.csv"), "--input-format", "parquet").exit_code == 0
    assert lovecraft("inspect", str(tmp_path / "t.csv")).exit_code == 0


@pytest.mark.parametrize("name", ["pz.csv.zst", "pz.csv"])
def test_zstd_that_starts_with_a_skippable_frame(tmp_path, name):
    """pzstd writes a skippable frame (its frame's size) before each zstd frame: such a file was
    "named .zst but is not zstd-compressed" (the magic looked for was the zstd frame's alone), and
    without the extension it was read as text ("invalid UTF-8"). Found by an outside trial."""
    import struct

    text = "a,b\n" + "".join(f"{i},{i * i}\n" for i in range(1000))
    frames = b""
    for part in (text[:2000], text[2000:]):  # two frames, as pzstd -p 2 writes them
        frame = zstandard.ZstdCompressor().compress(part.encode())
        frames += struct.pack("<III", 0x184D2A50, 4, len(frame)) + frame
    src = tmp_path / name
    src.write_bytes(frames)
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(src), "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "parquet")
    assert got["a"].tolist() == list(range(1000)) and got["b"].tolist() == [i * i for i in range(1000)]
    assert manifest(out)["sources"][0]["compression"] == "zstd"


@pytest.mark.parametrize(
    "name,data,enc",
    [
        ("u.csv", "a,b\n1,x\n".encode("utf-16"), "UTF-16LE"),
        ("u.jsonl", b"\xfe\xff" + '{"a": 1}\n'.encode("utf-16-be"), "UTF-16BE"),
        ("u.txt", "hello\n".encode("utf-32"), "UTF-32LE"),
    ],
)
def test_utf16_and_utf32_text_is_named_as_what_it_is(tmp_path, name, data, enc):
    """A UTF-16 CSV said "line 1 (the header): invalid UTF-8 ... pass --errors replace", and
    following that gave "row 1001: expected 3 fields, found 1". Its byte order mark says what it
    is (found by an outside trial)."""
    src = tmp_path / name
    src.write_bytes(data)
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet")
    ext = os.path.splitext(name)[1]
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {src}: {enc} text (a {enc[:6]} byte order mark begins it); lovecraft reads text as UTF-8; "
        f"re-encode it, e.g. iconv -f {enc[:6]} -t UTF-8 {src} > utf8{ext}\n",
    )
    assert not os.path.exists(tmp_path / "o")


def test_a_pipe_given_by_name_is_refused_not_misread(tmp_path):
    """A process substitution (<(zcat x)) or a mkfifo given as a path: its first bytes went to the
    look that tells its kind, so a JSON Lines input said 'line 1: not valid JSON', and with
    --dedup the second open waited forever for a writer (found by an outside trial). Refused in
    one line, before it is opened."""
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    for extra in ([], ["--dedup", "exact"]):
        r = lovecraft("convert", str(fifo), "-o", str(tmp_path / "o"), "--to", "parquet", *extra)
        assert (r.exit_code, r.stderr) == (
            1,
            f"Error: {fifo}: is a pipe (a process substitution or a mkfifo), which can be read only once; pipe it "
            "to stdin instead (... | lovecraft convert - --input-format KIND), or write it to a file\n",
        )
    assert not os.path.exists(tmp_path / "o")
