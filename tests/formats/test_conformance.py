"""What every registered output format must do, one suite parametrised over the format registry:
a round trip read back by the format's standard reader (np.load, h5py, pyarrow, tf.data: not by
us) equals the values the test wrote; ``verify`` passes and catches one flipped byte in any data
file; ``open_dataset`` gives the same rows; ``inspect`` describes the dataset with code that loads
it. A format added to the registry without a standard reader here fails the first test, on purpose.

Every format writes the sources whose column kinds it declares (``OutputFormat.kinds``): NPY arrays
(fixed), text lines (string) and text tokenized with ``--tokenizer bytes`` (sequence); a source it
does not hold is refused with one line naming the column, exit 1, and nothing written."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.formats import get, names
from tests.conftest import lovecraft
from tests.readback import READERS, manifest

FORMATS = names()
ROWS = 777


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    rng = np.random.default_rng(11)
    x = rng.normal(size=(ROWS, 3)).astype(np.float32)
    y = rng.integers(-(2**40), 2**40, size=ROWS, dtype=np.int64)
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", y)
    lines = ["", "plain", "ünïcode ✓", "tab\there"] + [f"line {i} " + "z" * (i % 40) for i in range(ROWS - 4)]
    (d / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tokens = [list(x.encode("utf-8")) for x in lines]
    return {
        "npy": ([str(d / "x.npy"), str(d / "y.npy")], {"x": x, "y": y}),
        "text": ([str(d / "t.txt")], {"text": lines}),
        "tokens": ([str(d / "t.txt"), "--tokenizer", "bytes"], {"tokens": tokens}),
    }


KINDS = {"npy": "fixed", "text": "string", "tokens": "sequence"}  # the column kind of each source


def holds(fmt: str, kind: str) -> bool:
    return KINDS[kind] in get(fmt).kinds


def first_held(fmt: str) -> str:
    """The first source a format holds (the one the verify and inspect tests use)."""
    return next(k for k in KINDS if holds(fmt, k))


@pytest.fixture(scope="module")
def written(sources, tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("out")
    for fmt in FORMATS:
        for kind, (inputs, _want) in sources.items():
            path = str(d / f"{fmt}-{kind}")
            r = lovecraft("convert", *inputs, "-o", path, "--to", fmt, "-q")
            if holds(fmt, kind):
                assert r.exit_code == 0, r.stderr
                out[fmt, kind] = path
            else:
                out[fmt, kind] = r
                assert not os.path.exists(path)
    return out


def _equal(got, want) -> None:
    if isinstance(want, np.ndarray):
        np.testing.assert_array_equal(np.asarray(got).reshape(want.shape), want)
    elif want and isinstance(want[0], list):
        assert [np.asarray(r).tolist() for r in got] == want
    else:
        assert list(got) == list(want)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_standard_reader_reads_what_was_written(fmt, kind, sources, written):
    assert fmt in READERS, f"no standard reader for {fmt} in tests/readback.py"
    if not holds(fmt, kind):
        r = written[fmt, kind]
        name = "x" if kind == "npy" else next(iter(sources[kind][1]))
        assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith("Error: ") and f"column '{name}': {fmt} holds" in r.stderr, r.stderr
        return
    got = READERS[fmt](written[fmt, kind])
    for name, want in sources[kind][1].items():
        _equal(got[name], want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_passes_and_catches_a_flipped_byte_in_every_file(fmt, written, tmp_path):
    import shutil

    src = written[fmt, first_held(fmt)]
    assert lc.verify(src).ok
    for f in manifest(src)["files"]:
        ds = str(tmp_path / f"copy-{f['path']}")
        shutil.copytree(src, ds)
        path = os.path.join(ds, f["path"])
        with open(path, "r+b") as fh:
            fh.seek(f["bytes"] - 1)  # the last byte: data or footer, never padding we skip
            b = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([b[0] ^ 0x01]))
        report = lc.verify(ds)
        assert not report.ok
        assert any(p.file == f["path"] for p in report.problems), report.lines()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_open_dataset_gives_the_same_rows(fmt, kind, sources, written):
    if not holds(fmt, kind):
        pytest.skip(f"{fmt} does not hold {KINDS[kind]} columns (refused: see the first test)")
    ds = lc.open_dataset(written[fmt, kind])
    assert len(ds) == ROWS and ds.format == fmt
    batches = list(ds.batches(100))
    for name, want in sources[kind][1].items():
        if kind == "text":
            got = [v for b in batches for v in b[name]]
        elif kind == "tokens":  # sequences: padded to the batch's longest, with their lengths
            got = [row[:n] for b in batches for row, n in zip(b[name], b[f"{name}_length"], strict=True)]
        else:
            got = np.concatenate([b[name] for b in batches])
        _equal(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_inspect_describes_it_with_loading_code(fmt, sources, written):
    kind = first_held(fmt)
    rep = lc.inspect(written[fmt, kind])
    assert rep["kind"] == "dataset" and rep["format"] == fmt and rep["rows"] == ROWS
    assert [f["name"] for f in rep["schema"]] == list(sources[kind][1])
    code = {k: v for k, v in rep["load"].items() if k != "lovecraft"}
    assert code and all(written[fmt, kind] in v for v in code.values())
