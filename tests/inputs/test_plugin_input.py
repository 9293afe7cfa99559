"""The boundary of an input kind, proven: an input kind defined here, in a test module, and
registered at run time is recognised by its extension, read by ``convert``, by ``shard`` (in worker
processes, which import this module again and read byte ranges of the file), described by
``inspect`` and compared by ``verify --against``, with no edit to the package, as the plugin format
of tests/formats/test_plugin_format.py is written.

The kind is LTSV (Labeled Tab-separated Values: ``label:value`` fields separated by tabs, one record
a line): a column per label of the first line, float64 where its first value is a number, else text.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import InputError
from lovecraft_convert.inputs import InputKind, register, unregister
from lovecraft_convert.inputs.base import Reader
from lovecraft_convert.inputs.streams import open_range
from lovecraft_convert.schema import FIXED, STRING, Batch, Field, Schema, VarColumn
from tests.conftest import lovecraft
from tests.readback import manifest

NAME = "ltsv"


def _fields(line: bytes) -> list[tuple[str, str]]:
    return [tuple(f.split(":", 1)) for f in line.decode().rstrip("\r\n").split("\t")]  # type: ignore[misc]


def _number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


class LtsvReader(Reader):
    def __init__(self, specs, options):
        super().__init__(specs, options)
        with self.open_spec(specs[0]) as f:
            first = _fields(f.readline())
        self.schema = Schema(tuple(Field(k, FIXED, "<f8") if _number(v) else Field(k, STRING, "|u1") for k, v in first))

    def batches(self):
        for spec in self.specs:
            yield from self._read(spec, self.open_spec(spec), 0)

    def partitions(self, target_bytes, mapper=None):
        return self._byte_partitions(target_bytes, quoted=False, mapper=mapper)

    def part_batches(self, part):
        spec = self.specs[part.spec]
        stream = None if part.start is None else open_range(spec.path, part.start, part.end)
        yield from self._read(spec, self.open_spec(spec, stream), part.line0)

    def _read(self, spec, stream, line0):
        rows = []
        with stream as f:
            for n, line in enumerate(f, line0 + 1):
                fields = dict(_fields(line))
                if list(fields) != self.schema.names:
                    raise InputError(f"{spec.name}, line {n}: labels {list(fields)}, not {self.schema.names}")
                rows.append(fields)
                if len(rows) == 256:
                    yield self._batch(rows)
                    rows = []
        if rows:
            yield self._batch(rows)

    def _batch(self, rows):
        cols = {}
        for f in self.schema:
            if f.kind == FIXED:
                cols[f.name] = np.array([float(r[f.name]) for r in rows])
            else:
                data = [r[f.name].encode() for r in rows]
                offsets = np.zeros(len(data) + 1, np.int64)
                np.cumsum([len(d) for d in data], out=offsets[1:])
                cols[f.name] = VarColumn(np.frombuffer(b"".join(data), np.uint8).copy(), offsets)
        return Batch(cols, len(rows))


LTSV = InputKind(NAME, LtsvReader, extensions=(".ltsv",), help="Labeled Tab-separated Values (a test plugin)")


@pytest.fixture
def ltsv_kind():
    kind = register(LTSV)
    yield kind
    unregister(NAME)


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.normal(size=3000)
    tags = [f"t{i % 13}" for i in range(3000)]
    p = tmp_path / "d.ltsv"
    p.write_text("".join(f"x:{float(a)!r}\ttag:{t}\tid:{i}\n" for i, (a, t) in enumerate(zip(x, tags, strict=True))))
    return str(p), x, tags


def test_convert_inspect_and_verify_read_the_registered_kind(ltsv_kind, table, tmp_path):
    src, x, tags = table
    out = str(tmp_path / "c")
    r = lovecraft("convert", src, "-o", out, "--to", "parquet", "-q")  # recognised by its extension
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)  # read back by pyarrow, not by us
    assert t.column("x").to_pylist() == x.tolist() and t.column("tag").to_pylist() == tags
    assert t.column("id").to_pylist() == [float(i) for i in range(3000)]
    assert manifest(out)["sources"][0]["format"] == NAME
    rep = lc.inspect(src)
    assert rep["rows"] == 3000 and [c["name"] for c in rep["columns"]] == ["x", "tag", "id"]
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 0, r.stdout + r.stderr
    # a changed value in the input: verify --against names it
    with open(src) as f:
        lines = f.read().splitlines(keepends=True)
    lines[10] = lines[10].replace("tag:t10", "tag:XX")
    with open(src, "w") as f:
        f.write("".join(lines))
    r = lovecraft("verify", out, "--against", src)
    assert r.exit_code == 1 and "tag" in r.stdout


def test_shard_reads_parts_of_it_in_workers(ltsv_kind, table, tmp_path):
    src, x, tags = table
    out = str(tmp_path / "s")
    m = lc.shard(src, out, to="parquet", num_shards=3, workers=2, part_bytes=16 << 10, progress=False)
    assert m.rows == 3000 and len(m["shards"]) == 3 and len(m["sources"]) == 1
    t = pq.read_table(out)
    assert sorted(t.column("x").to_pylist()) == sorted(x.tolist())
    assert t.column("tag").to_pylist() == tags  # in order: parts of the file, read by the workers
    assert lovecraft("verify", out).exit_code == 0


def test_the_kind_is_offered_by_input_format_and_gone_when_unregistered(table, tmp_path):
    src = table[0]
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "parquet")
    assert r.exit_code == 1 and "cannot tell the input format from its name or content" in r.stderr
    register(LTSV)
    try:
        os.rename(src, src + ".txt2")
        r = lovecraft("convert", src + ".txt2", "-o", str(tmp_path / "o"), "--to", "parquet", "--input-format", NAME)
        assert r.exit_code == 0, r.stderr
        r = lovecraft("convert", src + ".txt2", "-o", str(tmp_path / "p"), "--to", "parquet", "--input-format", "x")
        assert r.exit_code == 2 and f"'{NAME}'" in r.stderr  # listed among the choices
        with pytest.raises(ValueError, match=r"\.csv is the extension of the built-in kind csv"):
            register(InputKind("csv2", LtsvReader, extensions=(".csv",)))
    finally:
        unregister(NAME)
