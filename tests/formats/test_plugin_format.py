"""The boundary of a format, proven: an output format defined here, in a test module, and registered
at run time is offered by ``--to``, written by ``convert`` and by ``shard`` (in worker processes,
which import this module again), checked by ``verify``, described by ``inspect`` and read by
``open_dataset``, with no edit to the package.

The format is Arrow IPC files (``.arrow``), one per unit, read back with ``pyarrow.ipc``."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import lovecraft_convert as lc
from lovecraft_convert.arrowconv import arrow_schema, batch_from_arrow, to_arrow
from lovecraft_convert.errors import DatasetError
from lovecraft_convert.formats import register, unregister
from lovecraft_convert.formats.base import FileProblem, FileRecord, OutputFormat, PartReader, Writer, short
from lovecraft_convert.runtime.durable import HashingWriter
from tests.conftest import lovecraft
from tests.readback import manifest

NAME = "arrowipc"


class ArrowWriter(Writer):
    def __init__(self, directory, stem, schema, options):
        super().__init__(directory, stem, schema, options)
        self.path = os.path.join(directory, f"{stem or 'data'}.arrow")
        self.out = HashingWriter(self.path)
        self.w = ipc.new_file(self.out, arrow_schema(schema))

    def write(self, batch):
        self.w.write_batch(to_arrow(batch, self.schema))
        self.rows += batch.num_rows

    def close(self):
        self.w.close()
        nbytes, digest = self.out.close()
        return [FileRecord(os.path.basename(self.path), self.rows, nbytes, digest)]

    def abort(self):
        self.out.abort()


class ArrowReader(PartReader):
    random_access = False

    def __init__(self, rows, schema, path):
        super().__init__(rows, schema)
        self.path = path

    def chunks(self, start, stop, chunk_rows, rng=None):
        try:
            table = ipc.open_file(self.path).read_all()
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"cannot read ({short(e)})", where=self.path) from None
        for rb in table.slice(start, stop - start).to_batches(chunk_rows):
            yield batch_from_arrow(rb, self.schema)


class ArrowFormat(OutputFormat):
    name = NAME
    title = "Arrow IPC files (a test plugin)"
    extensions = (".arrow",)

    def writer_class(self):
        return ArrowWriter

    def open_part(self, files, manifest, shared):
        return ArrowReader(files.rows, files.schema, self.unit_file(files.paths, "a shard"))

    def check_unit(self, ctx, unit, schema):
        p = self.checked_unit_file(unit)
        try:
            f = ipc.open_file(ctx.full(p))
            if f.schema.names != schema.names:
                raise FileProblem(p, f"holds columns {f.schema.names}, the schema says {schema.names}", "schema")
            for i in range(f.num_record_batches):
                yield batch_from_arrow(f.get_batch(i), schema), p
        except (OSError, pa.ArrowException) as e:
            raise FileProblem(p, f"cannot be read as Arrow IPC ({short(e)})") from None

    def load_snippets(self, path, manifest):
        return {
            "pyarrow": f"import pyarrow.ipc as ipc\n\ntable = ipc.open_file({os.path.join(path, 'data.arrow')!r}).read_all()"
        }


@pytest.fixture
def arrow_format():
    fmt = register(ArrowFormat())
    yield fmt
    unregister(NAME)


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(size=1000)
    k = rng.integers(-5, 5, size=1000)
    lines = ["x,k,t"] + [f"{float(a)!r},{b},w{i % 7}" for i, (a, b) in enumerate(zip(x, k, strict=True))]
    p = tmp_path / "t.csv"
    p.write_text("\n".join(lines) + "\n")
    return str(p), x, k, [f"w{i % 7}" for i in range(1000)]


def _read_ipc(path):
    return ipc.open_file(path).read_all()


def test_the_registered_format_goes_through_every_command(arrow_format, table, tmp_path):
    src, x, k, t = table
    out = str(tmp_path / "c")
    r = lovecraft("convert", src, "-o", out, "--to", NAME, "-q")
    assert r.exit_code == 0, r.stderr
    got = _read_ipc(os.path.join(out, "data.arrow"))  # read by pyarrow, not by us
    assert got.column("x").to_numpy().tolist() == x.tolist()
    assert got.column("k").to_numpy().tolist() == k.tolist()
    assert got.column("t").to_pylist() == t
    assert manifest(out)["output_format"] == NAME
    # verify: intact, then a flipped byte is caught
    assert lovecraft("verify", out).exit_code == 0
    path = os.path.join(out, "data.arrow")
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    r = lovecraft("verify", out)
    assert r.exit_code == 1 and f"{path}: blake3 " in r.stdout
    # inspect describes it, with the plugin's load snippet
    rep = lc.inspect(str(tmp_path / "c"))
    assert rep["format"] == NAME and rep["rows"] == 1000 and "pyarrow" in rep["load"]


def test_shard_in_workers_and_open_dataset(arrow_format, table, tmp_path):
    src, x, k, t = table
    out = str(tmp_path / "s")
    r = lovecraft("shard", src, "-o", out, "--to", NAME, "--num-shards", "3", "--workers", "2", "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    names = sorted(f["path"] for f in m["files"])
    assert names == [f"part-0000{i}-of-00003.arrow" for i in range(3)]
    tables = [_read_ipc(os.path.join(out, n)) for n in names]
    assert sum(tb.num_rows for tb in tables) == 1000
    assert [v for tb in tables for v in tb.column("x").to_numpy().tolist()] == x.tolist()
    assert lovecraft("verify", out).exit_code == 0
    ds = lc.open_dataset(out)
    batches = list(ds.batches(256))
    assert np.concatenate([b["x"] for b in batches]).tolist() == x.tolist()
    assert [s for b in batches for s in b["t"].tolist()] == t


def test_the_format_is_offered_by_to_and_gone_when_unregistered(table, tmp_path):
    src = table[0]
    r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", NAME)
    assert r.exit_code == 2 and f"Invalid value for '--to': '{NAME}' is not one of" in r.stderr
    register(ArrowFormat())
    try:
        r = lovecraft("convert", src, "-o", str(tmp_path / "o"), "--to", "nope")
        assert r.exit_code == 2 and f"'{NAME}'" in r.stderr  # listed among the choices
    finally:
        unregister(NAME)
