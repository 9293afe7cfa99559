"""CSV string columns written to memmap as ``<col>.values.npy`` (UTF-8 bytes) + ``<col>.offsets.npy``
(int64, rows + 1), exactly as text columns are; read back with ``np.load`` and compared with the
values Python's csv module parses; verify, inspect and open_dataset take them."""

from __future__ import annotations

import csv
import glob
import io
import os

import numpy as np

import lovecraft_convert as lc
from tests.conftest import lovecraft


def _table(n: int = 3000) -> str:
    rng = np.random.default_rng(11)
    words = ["", "plain", "a,b", 'say "hi"', "two\nlines", "crlf\r\nline", "é ü 漢字", "5'10\"", " lead", "#x"]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["id", "name", "note", "x"])
    for i in range(n):
        w.writerow([i, rng.choice(words) + str(i % 7), rng.choice(words), i * 0.25])
    return out.getvalue()


def _strings(values: np.ndarray, offsets: np.ndarray) -> list[str]:
    data = values.tobytes()
    return [data[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)]


def test_csv_strings_to_memmap_read_with_np_load(tmp_path):
    text = _table()
    src = tmp_path / "t.csv"
    src.write_text(text, newline="")
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q")
    assert r.exit_code == 0, r.stderr
    want = list(csv.reader(io.StringIO(text, newline="")))[1:]
    assert sorted(os.listdir(out)) == [
        "_manifest.json", "id.npy", "name.offsets.npy", "name.values.npy",
        "note.offsets.npy", "note.values.npy", "x.npy",
    ]  # fmt: skip
    for j, col in ((1, "name"), (2, "note")):
        values = np.load(os.path.join(out, f"{col}.values.npy"))
        offsets = np.load(os.path.join(out, f"{col}.offsets.npy"))
        assert values.dtype == np.uint8 and offsets.dtype == np.int64 and len(offsets) == len(want) + 1
        assert offsets[0] == 0 and offsets[-1] == len(values)
        assert _strings(values, offsets) == [row[j] for row in want]
    assert np.load(os.path.join(out, "id.npy")).tolist() == [int(row[0]) for row in want]

    assert lc.verify(out, against=[str(src)]).ok
    rep = lc.inspect(out)
    assert {c["name"]: c["kind"] for c in rep["schema"]}["name"] == "string"
    ds = lc.open_dataset(out)
    got = next(ds.batches(batch_size=len(want)))
    assert list(got["note"]) == [row[2] for row in want]


def test_csv_strings_sharded_to_memmap(tmp_path):
    text = _table()
    src = tmp_path / "t.csv"
    src.write_text(text, newline="")
    out = str(tmp_path / "shards")
    m = lc.shard([str(src)], out, to="memmap", num_shards=3, part_bytes=16 << 10, workers=2, progress=False)
    assert m["rows"] == 3000
    want = [row[1] for row in list(csv.reader(io.StringIO(text, newline="")))[1:]]
    got = []
    for values in sorted(glob.glob(os.path.join(out, "*name.values.npy"))):
        got += _strings(np.load(values), np.load(values.replace(".values.", ".offsets.")))
    assert got == want
    r = lc.verify(out, against=[str(src)])
    assert r.ok, r.problems
