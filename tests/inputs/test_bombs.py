"""Compressed input that inflates without end is stopped inside the memory budget: decompression
gives at most what is asked per read, and the expansion and longest-line checks run as bytes
arrive. Each case runs the CLI under a hard 512 MiB memory cap (``../shared/tools/memcap``; skipped
with the reason where no memory cgroup can be made) and must end with one line and exit 1, quickly,
never killed (137)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import sys

import pytest
import zstandard

from tests.conftest import SHARED, memcapped, require_memcap

MEMCAP = os.path.join(SHARED, "tools", "memcap")
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
CAP_MIB = 512
BOMB_BYTES = 2 << 30  # one line of 2 GiB


LINE = b"a" * (64 << 20)  # no newline: the 2 GiB are one line
LINES = (b"a" * 127 + b"\n") * (1 << 19)  # 64 MiB of short lines


def _members(compress, chunk: bytes) -> bytes:
    """One compressed 64 MiB chunk, repeated: concatenated members (gzip), streams (bz2, xz) or
    frames (zstd) that every reader decodes as 2 GiB."""
    return compress(chunk) * (BOMB_BYTES // len(chunk))


CODECS = {
    "zst": zstandard.ZstdCompressor(level=3).compress,
    "gz": lambda d: gzip.compress(d, 9, mtime=0),
    "xz": lambda d: lzma.compress(d, preset=6),
    "bz2": lambda d: bz2.compress(d, 9),
}
BOMBS = list(CODECS)
RATIO = {"zst": 1000, "xz": 1000, "bz2": 1000, "gz": 200}  # gzip compresses these lines ~290x: tested at 200x


@pytest.fixture(scope="module")
def memcap() -> str:
    return require_memcap()


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[tuple[str, str], str]:
    d = tmp_path_factory.mktemp("bombs")
    out = {}
    for ext, compress in CODECS.items():
        for kind, chunk in (("line", LINE), ("lines", LINES)):
            data = _members(compress, chunk)
            assert len(data) * RATIO[ext] < BOMB_BYTES  # inflates over the ratio tested
            p = d / f"{kind}.txt.{ext}"
            p.write_bytes(data)
            out[ext, kind] = str(p)
    with gzip.open(out["gz", "lines"]) as f:  # what they hold, read by another reader
        assert f.read(256) == LINES[:256]
    return out


def _run(*args: str) -> tuple[int, str, int]:
    r, peak = memcapped(MEMCAP, CAP_MIB, [LOVECRAFT, *args], timeout=300)
    assert peak is not None, r.stderr
    lines = [x for x in r.stderr.splitlines() if not x.startswith("memcap:")]
    return r.returncode, "\n".join(lines), peak


@pytest.mark.parametrize("ext", BOMBS)
def test_expansion_limit_fires_as_bytes_arrive(memcap, bombs, tmp_path, ext):
    src = bombs[ext, "lines"]
    ratio = RATIO[ext]
    args = ["--max-expansion", str(ratio)]
    code, err, peak = _run("convert", src, "-o", str(tmp_path / "out"), "--to", "memmap", *args, "-q")
    assert (code, err) == (
        1,
        f"Error: {src}: inflates more than {ratio}x its compressed size (decompression bomb?); "
        "if the file is genuine, raise the limit with --max-expansion",
    )
    assert peak < 256  # MiB, with the interpreter and its imports
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("ext", BOMBS)
def test_a_line_that_never_ends_is_refused_inside_the_budget(memcap, bombs, tmp_path, ext):
    src = bombs[ext, "line"]
    code, err, peak = _run("convert", src, "-o", str(tmp_path / "out"), "--to", "memmap", "--max-expansion", "0", "-q")
    assert (code, err) == (
        1,
        f"Error: {src}, line 1: line longer than 16777216 bytes; raise --max-memory or split the line",
    )
    assert peak < 256
    assert not os.path.exists(tmp_path / "out")


def test_a_csv_record_that_never_ends_is_refused_inside_the_budget(memcap, bombs, tmp_path):
    src = str(tmp_path / "rec.csv.zst")
    with open(bombs["zst", "line"], "rb") as f, open(src, "wb") as g:
        g.write(zstandard.ZstdCompressor().compress(b"a,b\n") + f.read())  # a header, then the bomb
    code, err, peak = _run("convert", src, "-o", str(tmp_path / "out"), "--to", "parquet", "--max-expansion", "0", "-q")
    assert code == 1 and err.startswith(f"Error: {src}, line 2: a record longer than "), err
    assert peak < 512


@pytest.mark.parametrize("newlines", [False, True])
def test_a_field_of_megabytes_is_read_and_one_past_a_batch_is_refused_in_the_budget(memcap, tmp_path, newlines):
    """A CSV field of 10 MB could not be read at any --max-memory (pyarrow's parse block was at most
    4 MiB: "straddling object ... (try to increase block size?)"); it is now, its piece parsed as
    one block. A record must fit a batch (1/16 of --max-memory): one of 50 MB (with newlines in its
    quotes, which cost 545 MB and a kill under this cap) is refused in one line inside the cap, and
    one of 20 MB refused at the default budget is read at --max-memory 512MiB."""
    import pyarrow.parquet as pq

    unit = b'ab,""c\n' if newlines else b"abcdefg"
    quote = b'"' if newlines else b""

    def make(name: str, mib: int) -> str:
        p = tmp_path / name
        body = unit * (mib * (1 << 20) // len(unit))
        p.write_bytes(b"id,text,n\n1,short,1\n2," + quote + body + quote + b",2\n3,tail,3\n")
        return str(p)

    ten = make("ten.csv", 10)
    code, err, peak = _run("convert", ten, "-o", str(tmp_path / "o10"), "--to", "parquet", "-q")
    assert (code, err) == (0, "")
    t = pq.read_table(str(tmp_path / "o10" / "data.parquet"))
    assert t.column("n").to_pylist() == [1, 2, 3]
    want = (unit * (10 * (1 << 20) // len(unit))).replace(b'""', b'"').decode()
    assert t.column("text").to_pylist() == ["short", want, "tail"]
    fifty = make("fifty.csv", 50)
    code, err, peak = _run("convert", fifty, "-o", str(tmp_path / "o50"), "--to", "parquet", "-q")
    assert (code, err) == (
        1,
        f"Error: {fifty}, line 3: a record longer than 16777216 bytes (unbalanced quote?); check the quoting, or "
        "raise --max-memory (a record must fit in 1/16 of it)",
    )
    assert peak < 256 and not os.path.exists(tmp_path / "o50")
    # past a batch of the default budget, read with a larger one (20 MB at 512MiB: its batch is 32 MiB;
    # under this cap, not 50 MB at 1GiB: 50 MB of quoted newlines take about 545 MB)
    twenty = make("twenty.csv", 20)
    code, err, peak = _run("convert", twenty, "-o", str(tmp_path / "o20"), "--to", "parquet", "-q")
    assert code == 1 and "a record longer than 16777216 bytes" in err
    code, err, peak = _run(
        "convert", twenty, "-o", str(tmp_path / "o20"), "--to", "parquet", "-q", "--max-memory", "512MiB"
    )
    assert (code, err) == (0, "")
