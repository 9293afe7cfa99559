"""A manifest is input, and bounded like any input: under a 512 MiB memory cap (``../shared/tools/memcap``)
every command given a manifest padded with 700 MB of spaces, or a TFRecord manifest that declares
10**12 rows or a block index of 10**9 blocks, refuses it with one line, its peak reported. Before,
each read the whole manifest or allocated what it declared, and was killed for memory.

Slow (each command is a process under the cap); skipped with the reason when memcap is absent or
cannot make a cgroup (exit 3: not root, no cgroup v1 memory controller).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.manifest import MAX_MANIFEST_BYTES
from tests.conftest import SHARED, SUBPROCESS_ENV, memcapped, require_memcap

pytestmark = pytest.mark.slow

MEMCAP = os.path.join(SHARED, "tools", "memcap")
CAP_MIB = 512
PAD = 700 << 20
EDITED = "the manifest was edited or damaged; re-create the dataset"


@pytest.fixture(scope="module")
def memcap() -> str:
    return require_memcap()


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("memcap_manifest")
    np.save(d / "x.npy", np.arange(600, dtype=np.float32).reshape(300, 2))
    out = {fmt: str(d / fmt) for fmt in ("parquet", "tfrecord")}
    for fmt, path in out.items():
        lc.convert([str(d / "x.npy")], path, to=fmt, progress=False)
    return out


def _variant(made, tmp_path, how: str) -> str:
    ds = str(tmp_path / "ds")
    shutil.copytree(made["parquet" if how == "padded" else "tfrecord"], ds)
    mpath = os.path.join(ds, "_manifest.json")
    if how == "padded":
        with open(mpath, "ab") as f:
            f.truncate(os.path.getsize(mpath) + PAD)  # 700 MB of spaces: written, not a sparse hole
            f.seek(0, os.SEEK_END)
        with open(mpath, "r+b") as f:
            f.seek(-PAD, os.SEEK_END)
            for _ in range(PAD >> 20):
                f.write(b" " * (1 << 20))
        return ds
    with open(mpath) as f:
        m = json.load(f)
    if how == "rows":
        m["rows"] = m["shards"][0]["rows"] = m["files"][0]["rows"] = 10**12
    else:
        m["tfrecord"]["blocks"]["data.tfrecord"]["bytes"] = [[1, 10**9]]
    with open(mpath, "w") as f:
        json.dump(m, f)
    return ds


OPEN = (
    "import sys, lovecraft_convert as lc\n"
    "from lovecraft_convert.errors import LovecraftError\n"
    "try:\n"
    "    print(sum(len(b['x']) for b in lc.open_dataset(sys.argv[1]).batches(64, shuffle=True, seed=1)))\n"
    "except LovecraftError as e:\n"
    "    print('refused:', e.one_line())\n"
)


def _commands(ds: str, out: str) -> dict[str, list[str]]:
    py = [sys.executable]
    return {
        "verify": [*py, "-m", "lovecraft_convert", "verify", ds],
        "inspect": [*py, "-m", "lovecraft_convert", "inspect", ds],
        "convert": [*py, "-m", "lovecraft_convert", "convert", ds, "-o", out, "--to", "memmap", "-q"],
        "open_dataset": [*py, "-c", OPEN, ds],
    }


def _said(ds: str, how: str) -> dict[str, tuple[int, str]]:
    """(exit code, the line) each command must give."""
    m = f"{ds}/_manifest.json"
    if how == "padded":
        size = os.path.getsize(m)
        line = f"{m}: {size} bytes, more than the {MAX_MANIFEST_BYTES} a manifest may take (not read)"
        err = f"{line}; re-create the dataset"
        return {"verify": (1, line), "inspect": (1, f"Error: {err}"), "convert": (1, f"Error: {err}"),
                "open_dataset": (0, f"refused: {err}")}  # fmt: skip
    if how == "rows":
        why = f"{m}: shard 0 declares {10**12} rows; its files (11100 bytes) hold at most 693; {EDITED}"
        verify = (
            f"{ds}/data.tfrecord: holds 300 records, the manifest says {10**12}; the file is cut short; re-create it"
        )
    else:
        why = (
            f"{m}: shard 0 file data.tfrecord: the manifest lists {10**9} blocks in {10**9} bytes; the file has "
            f"300 records (1 blocks of 32768) in 11100 bytes; {EDITED}"
        )
        verify = (
            f"{ds}/data.tfrecord: the manifest lists {10**9} blocks in {10**9} bytes; the file has 300 records "
            "(1 blocks of 32768) in 11100 bytes; the dataset is damaged; run `lovecraft verify` or re-create it"
        )
    return {"verify": (1, verify), "convert": (1, f"Error: {why}"), "open_dataset": (0, f"refused: {why}")}


@pytest.mark.parametrize("how", ["padded", "rows", "blocks"])
def test_every_command_refuses_a_hostile_manifest_in_bounded_memory(memcap, made, tmp_path, how):
    ds = _variant(made, tmp_path, how)
    want = _said(ds, how)
    out = str(tmp_path / "out")
    for name, cmd in _commands(ds, out).items():
        if name not in want:
            continue
        r, peak = memcapped(memcap, CAP_MIB, cmd, env=SUBPROCESS_ENV)
        print(f"{how} {name}: peak {peak} MiB under a {CAP_MIB} MiB cap")
        assert peak is not None and peak < CAP_MIB, (name, r.stderr[-2000:])
        code, line = want[name]
        shown = r.stdout if name in ("verify", "open_dataset") else r.stderr
        lines = [x for x in shown.splitlines() if not x.startswith("memcap:")]
        assert (r.returncode, lines) == (code, [line]), (name, r.stdout[-1000:], r.stderr[-2000:])
        assert not os.path.exists(out)
