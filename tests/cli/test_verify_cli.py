"""``lovecraft verify`` and ``lovecraft inspect`` from the shell: exit codes, exact lines, --json."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.readback import manifest


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_verify")
    np.save(d / "x.npy", np.arange(12000, dtype=np.float32).reshape(3000, 4))
    np.save(d / "y.npy", np.arange(3000, dtype=np.int64))
    out = str(d / "out")
    lc.convert([str(d / "x.npy"), str(d / "y.npy")], out, to="parquet", progress=False)
    return out, [str(d / "x.npy"), str(d / "y.npy")]


def test_intact_exits_0(dataset):
    out, _ = dataset
    r = lovecraft("verify", out)
    assert r.exit_code == 0
    assert r.stdout.startswith(f"ok: {out}: parquet, 3,000 rows, 1 file, ")
    assert "verified (hashes, decoding, statistics)" in r.stdout
    r = lovecraft("verify", out, "-q")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "", "")


def test_against_exits_0(dataset):
    out, src = dataset
    r = lovecraft("verify", out, "--against", *src)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "verified (hashes, decoding, statistics, source)" in r.stdout


def test_problems_one_line_each_on_stdout_exit_1(dataset, tmp_path):
    out, _ = dataset
    ds = str(tmp_path / "ds")
    shutil.copytree(out, ds)
    os.remove(os.path.join(ds, "data.parquet"))
    (tmp_path / "ds" / "stray.bin").write_bytes(b"x")
    r = lovecraft("verify", ds)
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [
        f"{ds}/stray.bin: not listed in the manifest (pyarrow, pandas and dask read every file whose name does not "
        "start with _ or . as Parquet)",
        f"{ds}/data.parquet: listed in the manifest but missing",
    ]
    assert r.stderr == f"{ds}: 2 problems found\n"


def test_json_report(dataset, tmp_path):
    out, src = dataset
    r = lovecraft("verify", out, "--json", "--against", *src)
    assert r.exit_code == 0
    rep = json.loads(r.stdout)
    assert rep["ok"] is True and rep["problems"] == [] and rep["rows"] == 3000 and rep["format"] == "parquet"
    assert rep["against"]["mode"] == "rows" and rep["against"]["differing_rows"] == 0
    ds = str(tmp_path / "ds")
    shutil.copytree(out, ds)
    m = manifest(ds)
    m["rows"] = 7
    with open(os.path.join(ds, "_manifest.json"), "w") as f:
        json.dump(m, f)
    r = lovecraft("verify", ds, "--json")
    assert r.exit_code == 1
    rep = json.loads(r.stdout)
    assert rep["ok"] is False
    assert rep["problems"] == [
        {
            "file": "_manifest.json",
            "path": f"{ds}/_manifest.json",
            "kind": "rows",
            "message": "rows is 7, its shards add up to 3000",
        }
    ]


def test_changed_source_exits_1_naming_it(dataset, tmp_path):
    out, src = dataset
    y = np.arange(3000, dtype=np.int64)
    y[2999] = -1
    np.save(tmp_path / "y.npy", y)
    r = lovecraft("verify", out, "--against", src[0], str(tmp_path / "y.npy"))
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [
        f"{tmp_path}/y.npy: row 3000, column 'y': -1 in the source, 2999 in the dataset (data.parquet, row 3000)"
    ]


def test_usage_errors_exit_2(dataset):
    out, src = dataset
    r = lovecraft("verify", out, src[0])
    assert r.exit_code == 2 and "give --against to compare DATASET with INPUTS" in r.stderr
    r = lovecraft("verify", out, "--against")
    assert r.exit_code == 2 and "--against needs the INPUTS" in r.stderr
    r = lovecraft("verify")
    assert r.exit_code == 2


def test_not_a_directory_is_an_error(tmp_path):
    r = lovecraft("verify", str(tmp_path / "nope"))
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == f"Error: {tmp_path}/nope: no such dataset directory; give the output directory of lovecraft\n"


def test_an_interrupted_runs_output_points_to_resume(tmp_path):
    """A shard killed before its commit leaves .out.partial and no out: verify said "no such
    dataset directory"; the line names the interrupted run's work and --resume."""
    import signal

    src = tmp_path / "in.csv"
    src.write_text("a,b\n" + "".join(f"{i},{2 * i}\n" for i in range(200_000)))
    out = tmp_path / "out"
    # killed at its first unit's commit: the run's work stays in .out.partial
    code = (
        "import os, signal, sys\n"
        "from lovecraft_convert.engine import journal\n"
        "journal.Journal.add = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
        "from lovecraft_convert.cli import main\n"
        "sys.argv = ['lovecraft', 'shard', sys.argv[1], '-o', sys.argv[2], '--to', 'parquet', '--num-shards', '4',"
        " '--workers', '1', '-q']\n"
        "main()\n"
    )
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code, str(src), str(out)], capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert not out.exists() and (tmp_path / ".out.partial").is_dir()
    r = lovecraft("verify", str(out))
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: no dataset yet: the work of an interrupted run is in {tmp_path}/.out.partial; run the same "
        "shard or bucket command again with --resume to finish it (a convert starts again)\n",
    )
    assert lovecraft("inspect", str(out)).stderr == r.stderr  # (it said "no such file; check the path")


def test_a_file_given_as_the_dataset_says_so(tmp_path):
    """``verify data.csv``: the file exists, so "no such dataset directory" misled; the line says
    what it is and how a file is checked."""
    f = tmp_path / "data.csv"
    f.write_text("a\n1\n")
    r = lovecraft("verify", str(f))
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr == (
        f"Error: {f}: a file, not a dataset directory; give the output directory of lovecraft (to check it "
        "against this file: verify DIR --against FILE)\n"
    )


def test_missing_source_is_an_error(dataset, tmp_path):
    out, _ = dataset
    r = lovecraft("verify", out, "--against", str(tmp_path / "gone.npy"))
    assert r.exit_code == 1
    assert r.stderr == f"Error: {tmp_path}/gone.npy: no such file; check the path\n"


# --------------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------------


def test_inspect_text_report(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("".join("a" * (i % 50) + "\n" for i in range(1000)))
    r = lovecraft("inspect", str(p), "--num-buckets", "4")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"{p}: text, not compressed, ")
    assert "rows: 1,000\n" in out
    assert "column 'text': string" in out
    assert "length (bytes): min 0  mean 24.5  p50 24  p90 44  p99 49  max 49  (20 empty)" in out
    assert "--num-buckets 4: boundaries [11, 23, 36, 49], padding efficiency 81.0% (unbucketed 50.0%)" in out
    assert "█" in out


def test_inspect_sample_says_it_is_an_estimate(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("".join(f"line {i}\n" for i in range(200_000)))
    r = lovecraft("inspect", str(p), "--sample", "1000", "--json")
    rep = json.loads(r.stdout)
    assert rep["rows_exact"] is False and rep["sample_rows"] == 1000
    r = lovecraft("inspect", str(p), "--sample", "1000")
    assert "(an ESTIMATE from a sample of the first 1,000 rows)" in r.stdout


def test_inspect_dataset(dataset):
    out, _ = dataset
    r = lovecraft("inspect", out)
    assert r.exit_code == 0
    assert r.stdout.startswith(f"{out}: lovecraft dataset, parquet, 3,000 rows, ")
    assert f'df = pl.read_parquet("{out}/*.parquet")' in r.stdout
    rep = json.loads(lovecraft("inspect", out, "--json").stdout)
    assert rep["kind"] == "dataset" and rep["rows"] == 3000 and rep["num_shards"] == 1


def _npy_bytes(a) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


@pytest.mark.parametrize(
    "name,content,expected",
    [
        (
            "huge.npy",
            b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(
                127, b" "
            )
            + b"\n"
            + b"\0" * 64,
            "Error: {d}/huge.npy: truncated: header declares shape (1000000000000,) float64 (8000000000000 data bytes) but the file holds 64; re-create the file",
        ),
        (
            "cut.npy",
            _npy_bytes(np.arange(100.0))[:-8],
            "Error: {d}/cut.npy: truncated: header declares shape (100,) float64 (800 data bytes) but the file holds 792; re-create the file",
        ),
        (
            "cut.txt.gz",
            gzip.compress(b"hello\n" * 1000, mtime=0)[:30],
            "Error: {d}/cut.txt.gz: truncated gzip stream after 30 compressed bytes (Compressed file ended before the end-of-stream marker was reached); re-create or re-download the file",
        ),
    ],
)
def test_inspect_hostile_inputs_one_clean_error(tmp_path, name, content, expected):
    (tmp_path / name).write_bytes(content)
    r = lovecraft("inspect", str(tmp_path / name))
    assert r.exit_code == 1
    assert r.stdout == ""
    assert r.stderr == expected.format(d=tmp_path) + "\n"


def test_inspect_gzip_bomb_is_stopped(tmp_path):
    p = tmp_path / "bomb.txt.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        block = b"a" * ((1 << 20) - 1) + b"\n"
        for _ in range(80):
            f.write(block)
    r = lovecraft("inspect", str(p), "--max-expansion", "100")
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {p}: inflates more than 100x its compressed size (decompression bomb?)")


def test_a_changed_value_of_a_memmap_dataset_names_its_columns_file(tmp_path):
    """A memmap dataset keeps a file per column: the difference names the changed column's file
    (it named the unit's first file, id.npy, for every column), plain and sharded."""
    src = tmp_path / "d.csv"
    src.write_text("id,name,label\n" + "".join(f"{i},n{i},{i % 3}\n" for i in range(400)))
    for cmd, extra, label, name in (
        ("convert", [], "label.npy", "name.values.npy"),
        ("shard", ["--num-shards", "2"], "part-00000-of-00002.label.npy", "part-00000-of-00002.name.values.npy"),
    ):
        out = str(tmp_path / cmd)
        assert lovecraft(cmd, str(src), "-o", out, "--to", "memmap", "-q", *extra).exit_code == 0
        changed = tmp_path / f"{cmd}.csv"
        changed.write_text(src.read_text().replace("\n5,n5,2\n", "\n5,n5,7\n").replace("\n9,n9,0\n", "\n9,x9,0\n"))
        r = lovecraft("verify", out, "--against", str(changed))
        assert r.exit_code == 1
        assert r.stdout.splitlines()[:2] == [
            f"{changed}: row 6, column 'label': 7 in the source, 2 in the dataset ({label}, row 6)",
            f"{changed}: row 10, column 'name': 'x9' in the source, 'n9' in the dataset ({name}, row 10)",
        ]
