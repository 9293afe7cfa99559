"""Other projects' test files (../shared/vectors, GUIDE.md §6), read in place, never copied here."""

from __future__ import annotations

import glob
import json
import os

from tests.conftest import leftovers, lovecraft
from tests.readback import read_back


def _out(tmp_path, name="out"):
    return str(tmp_path / name)


def test_csv_spectrum_rows_as_strings(tmp_path, vectors):
    """Every csv-spectrum CSV converts to exactly the rows of its JSON when columns are strings."""
    csvs = sorted(glob.glob(os.path.join(vectors, "csv-spectrum", "csvs", "*.csv")))
    assert len(csvs) >= 10
    for path in csvs:
        name = os.path.splitext(os.path.basename(path))[0]
        with open(os.path.join(vectors, "csv-spectrum", "json", name + ".json"), encoding="utf-8") as f:
            want = json.load(f)
        cols = list(want[0])
        out = _out(tmp_path, name)
        args = [a for c in cols for a in ("--column-type", f"{c}=string")]
        r = lovecraft("convert", path, "-o", out, "--to", "parquet", "-q", *args)
        assert r.exit_code == 0, (name, r.stderr)
        got = read_back(out, "parquet")
        rows = [{c: got[c][i] for c in cols} for i in range(len(want))]
        assert rows == want, name
        assert len(got[cols[0]]) == len(want), name


def test_utf8tests_replace_matches_reference(tmp_path, vectors):
    src = os.path.join(vectors, "utf8tests", "utf8tests.bin")
    with open(os.path.join(vectors, "utf8tests", "artifacts", "utf8.replace.python.3.7.5.txt"), "rb") as f:
        want = f.read().decode("utf-8").split("\n")
    if want and want[-1] == "":
        want.pop()
    out = _out(tmp_path)
    r = lovecraft("convert", src, "--input-format", "text", "-o", out, "--to", "memmap", "--errors", "replace", "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "memmap")["text"]
    assert [g.rstrip("\r") for g in got] == [w.rstrip("\r") for w in want]


def test_utf8tests_strict_names_the_line(tmp_path, vectors):
    src = os.path.join(vectors, "utf8tests", "utf8tests.bin")
    with open(src, "rb") as f:
        data = f.read()
    first_bad = next(i for i, line in enumerate(data.split(b"\n"), 1) if _invalid(line))
    r = lovecraft("convert", src, "--input-format", "text", "-o", _out(tmp_path), "--to", "memmap", "-q")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {src}, line {first_bad}: invalid UTF-8 (")
    assert r.stderr.rstrip().endswith("fix the file or pass --errors replace")


def _invalid(line: bytes) -> bool:
    try:
        line.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_zstd_golden_frames_decode(tmp_path, vectors):
    import zstandard

    files = sorted(glob.glob(os.path.join(vectors, "zstd", "tests", "golden-decompression", "*.zst")))
    assert files
    for i, path in enumerate(files):
        # the reference: the zstandard library itself, decoding every frame
        with open(path, "rb") as f:
            reader = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)
            want = reader.read()
        src = str(tmp_path / f"g{i}.txt.zst")
        os.symlink(path, src)
        out = _out(tmp_path, f"o{i}")
        r = lovecraft(
            "convert",
            src,
            "-o",
            out,
            "--to",
            "memmap",
            "--input-format",
            "text",
            "--errors",
            "replace",
            "--max-expansion",
            "0",
            "-q",
        )
        if not want:
            assert r.exit_code == 1 and "empty input" in r.stderr, (path, r.stderr)
            continue
        assert r.exit_code == 0, (path, r.stderr)
        lines = want.decode("utf-8", "replace").split("\n")
        if lines[-1] == "":
            lines.pop()
        got = read_back(out, "memmap")["text"]
        assert [g.rstrip("\r") for g in got] == [x.rstrip("\r") for x in lines], path


def test_zstd_golden_errors_rejected(tmp_path, vectors):
    files = sorted(glob.glob(os.path.join(vectors, "zstd", "tests", "golden-decompression-errors", "*.zst")))
    assert files
    for i, path in enumerate(files):
        src = str(tmp_path / f"e{i}.txt.zst")
        os.symlink(path, src)
        out = _out(tmp_path, f"o{i}")
        r = lovecraft("convert", src, "-o", out, "--to", "memmap", "--input-format", "text", "-q")
        assert r.exit_code == 1, (path, r.stdout)
        assert r.stderr.startswith(f"Error: {src}: ") and r.stderr.count("\n") == 1, r.stderr
        assert "zstd" in r.stderr or "empty input" in r.stderr, r.stderr
        assert not os.path.exists(out)
    assert leftovers(tmp_path) == []


def test_numpy_pickled_object_arrays_refused(tmp_path, vectors):
    files = sorted(glob.glob(os.path.join(vectors, "numpy", "numpy", "lib", "tests", "data", "*.npy")))
    assert files
    for i, path in enumerate(files):
        out = _out(tmp_path, f"o{i}")
        r = lovecraft("convert", path, "-o", out, "--to", "memmap", "-q")
        assert r.exit_code == 1
        assert (
            r.stderr
            == f"Error: {path}: holds Python objects (dtype object); refusing to unpickle; save it with a numeric or fixed-width string dtype\n"
        )
        assert not os.path.exists(out)
