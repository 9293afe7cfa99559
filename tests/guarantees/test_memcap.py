"""Bounded memory, proved under a hard limit: inputs four times larger than a 512 MiB cgroup memory
cap (``../shared/tools/memcap``) convert to every format with ``--max-memory 256MiB``, while loading
the same NPY whole with NumPy under the same cap is killed.

Every input format converts to every output format here: text goes to memmap too, as the
``<col>.values.npy``/``<col>.offsets.npy`` pair (as CSV string columns would; these CSV columns
are numeric). Slow (several minutes; ``make test-slow``); skipped with the
reason when memcap is absent, cannot make a cgroup (exit 3: not root, no cgroup v1 memory
controller), or when the disk has less than 12 GB free.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import SHARED, SUBPROCESS_ENV, memcapped, require_memcap

pytestmark = pytest.mark.slow

MEMCAP = os.path.join(SHARED, "tools", "memcap")
CAP_MIB = 512
INPUT_BYTES = 4 * CAP_MIB << 20  # each input is at least 4x the cap (2 GiB)
FREE_BYTES = 12 * 10**9
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
TIMINGS: list[tuple[str, float, int | None]] = []
EXPECTED: dict[str, object] = {}  # per input kind: what the test wrote, to compare the outputs with
COLUMNS = {"csv": [f"x{i}" for i in range(8)] + ["label"], "npy": ["x"], "text": ["text"]}


def _capped(*cmd: str, timeout: float = 3600) -> tuple[subprocess.CompletedProcess, int | None]:
    return memcapped(MEMCAP, CAP_MIB, list(cmd), timeout=timeout, env=SUBPROCESS_ENV)


@pytest.fixture(scope="module")
def memcap() -> str:
    return require_memcap()


@pytest.fixture(scope="module")
def inputs(memcap, tmp_path_factory) -> Iterator[dict[str, tuple[str, int]]]:
    """(path, rows) of a CSV (8 float columns and an int label), an NPY float32 (N, 64) and a text
    file, each at least 2 GiB, written by repeating a generated block (quick)."""
    d = tmp_path_factory.mktemp("memcap_in")
    free = shutil.disk_usage(d).free
    if free < FREE_BYTES:
        pytest.skip(
            f"needs {FREE_BYTES / 1e9:.0f} GB free for 2 GiB inputs and their outputs; {free / 1e9:.1f} GB free"
        )
    t0 = time.time()
    rng = np.random.default_rng(0)
    out: dict[str, tuple[str, int]] = {}

    npy = str(d / "x.npy")
    cols = 64
    rows = INPUT_BYTES // (4 * cols)
    with open(npy, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (rows, cols)})
        step = 1 << 18
        for i in range(0, rows, step):
            rng.standard_normal((min(step, rows - i), cols), dtype=np.float32).tofile(f)
    out["npy"] = (npy, rows)

    csv = str(d / "data.csv")
    block_rows = 100_000
    x = rng.normal(size=(block_rows, 8))
    label = rng.integers(0, 10, size=block_rows)
    text = io.StringIO()
    np.savetxt(text, np.column_stack([x, label]), fmt=["%.6f"] * 8 + ["%d"], delimiter=",")
    buf = text.getvalue().encode()
    reps = -(-INPUT_BYTES // len(buf))
    with open(csv, "wb") as f:
        f.write(b",".join(b"x%d" % i for i in range(8)) + b",label\n")
        for _ in range(reps):
            f.write(buf)
    out["csv"] = (csv, block_rows * reps)
    fields = [line.split(",") for line in buf.decode().splitlines()]  # the block, parsed here
    EXPECTED["csv"] = {
        **{f"x{i}": np.array([float(r[i]) for r in fields]) for i in range(8)},
        "label": np.array([int(r[8]) for r in fields], dtype=np.int64),
    }

    txt = str(d / "corpus.txt")
    words = np.array(["the", "of", "and", "memory", "bounded", "stream", "shard", "record", "lovecraft", "zstd"])
    lines = [" ".join(words[rng.integers(0, 10, size=int(n))]) for n in rng.integers(1, 40, size=50_000)]
    buf = ("\n".join(lines) + "\n").encode()
    reps = -(-INPUT_BYTES // len(buf))
    with open(txt, "wb") as f:
        for _ in range(reps):
            f.write(buf)
    out["text"] = (txt, len(lines) * reps)
    EXPECTED["text"] = lines
    for p, _ in out.values():
        assert os.path.getsize(p) >= INPUT_BYTES
    print(
        f"\nmemcap inputs ({', '.join(f'{k} {os.path.getsize(p) / 2**30:.2f} GiB' for k, (p, _) in out.items())}) made in {time.time() - t0:.0f}s"
    )
    yield out
    shutil.rmtree(d, ignore_errors=True)  # 6 GiB: gone with the module, not kept to the session's end


@pytest.mark.parametrize("to", FORMATS)
@pytest.mark.parametrize("kind", ["csv", "npy", "text"])
def test_convert_under_memcap(tmp_path, inputs, kind, to):
    src, rows = inputs[kind]
    out = str(tmp_path / "out")
    t0 = time.time()
    r, peak = _capped(LOVECRAFT, "convert", src, "-o", out, "--to", to, "--max-memory", "256MiB", "-q")
    took = time.time() - t0
    TIMINGS.append((f"convert {kind} -> {to}", took, peak))
    print(f"\nconvert {kind} -> {to}: rc {r.returncode}, {took:.0f}s, peak {peak} MiB (cap {CAP_MIB})")
    assert r.returncode == 0, f"rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
    with open(os.path.join(out, "_manifest.json")) as f:
        m = json.load(f)
    assert m["rows"] == rows
    assert m["complete"] is True
    t0 = time.time()
    _check_output(out, to, kind, src, rows)  # the files themselves, through their own readers
    print(f"  read back in {time.time() - t0:.0f}s")
    if kind == "npy":  # verify, bounded too: every file decoded and hashed under the same cap
        t0 = time.time()
        v, vpeak = _capped(LOVECRAFT, "verify", out, "--max-memory", "256MiB", "-q")
        TIMINGS.append((f"verify npy -> {to}", time.time() - t0, vpeak))
        assert (v.returncode, v.stdout) == (0, ""), v.stderr[-2000:]
    shutil.rmtree(out)


WIDE_CAP_MIB = 256


@pytest.fixture(scope="module")
def wide_csv(memcap, tmp_path_factory) -> tuple[str, np.ndarray]:
    """A feature table of 2,000 float columns and 3,000 rows (~55 MB), written with %.6g."""
    d = tmp_path_factory.mktemp("wide")
    x = np.random.default_rng(1).normal(size=(3000, 2000))
    p = d / "wide.csv"
    with open(p, "w") as f:
        f.write(",".join(f"c{i}" for i in range(2000)) + "\n")
        np.savetxt(f, x, fmt="%.6g", delimiter=",")
    return str(p), np.loadtxt(p, delimiter=",", skiprows=1, max_rows=5)


@pytest.mark.parametrize("stack", [False, True])
@pytest.mark.parametrize("to", FORMATS)
def test_a_wide_csv_converts_to_every_format_under_a_256_mib_cap(tmp_path, wide_csv, to, stack):
    """Issue: 2,000 columns at --max-memory 64MiB peaked at 2.1 GiB for HDF5; every per-column cost
    is now sized from the budget (and --stack-columns makes them one column)."""
    src, head = wide_csv
    out = str(tmp_path / "out")
    extra = ["--stack-columns", "x=c0:c1999"] if stack else []
    r, peak = memcapped(
        MEMCAP, WIDE_CAP_MIB, [LOVECRAFT, "convert", src, "-o", out, "--to", to, "--max-memory", "64MiB", "-q", *extra],
        timeout=1800,
    )  # fmt: skip
    TIMINGS.append((f"wide csv -> {to}{' stacked' if stack else ''}", 0.0, peak))
    assert r.returncode == 0, f"rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
    from tests.readback import READERS

    got = READERS[to](out)
    if stack:
        np.testing.assert_allclose(np.asarray(got["x"])[:5], head, rtol=1e-6)
    else:
        np.testing.assert_allclose(
            np.column_stack([np.asarray(got[f"c{i}"])[:5] for i in range(2000)]), head, rtol=1e-6
        )


CHUNK = 1 << 20  # rows per comparison step (memmap, HDF5); Parquet by row group, TFRecord by 64 Ki records


def _text_chunk(strings) -> tuple[np.ndarray, bytes]:
    """A run of text rows as (their byte lengths, their bytes joined): compared in one go."""
    return np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)), b"".join(strings)


def _arrow_text(arr) -> tuple[np.ndarray, bytes]:
    """:func:`_text_chunk` of an Arrow string array, from its offsets and data buffers."""
    import pyarrow as pa

    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = arr.buffers()[2]
    return np.diff(offsets), data[int(offsets[0]) : int(offsets[-1])].to_pybytes()


def _chunks(out: str, to: str, kind: str):
    """Every row of the output in order, as (first row, {column: values}), read with np.load,
    h5py, pyarrow or tf.data (a parse spec written here); text columns as :func:`_text_chunk`."""
    names = COLUMNS[kind]
    if to == "memmap":
        if kind == "text":
            values = np.load(os.path.join(out, "text.values.npy"), mmap_mode="r")
            offsets = np.load(os.path.join(out, "text.offsets.npy"), mmap_mode="r")
            for a in range(0, len(offsets) - 1, CHUNK):
                o = np.asarray(offsets[a : a + CHUNK + 1])
                yield a, {"text": (np.diff(o), values[o[0] : o[-1]].tobytes())}
            return
        arrays = {n: np.load(os.path.join(out, f"{n}.npy"), mmap_mode="r") for n in names}
        rows = {len(a) for a in arrays.values()}
        assert len(rows) == 1, rows
        for a in range(0, rows.pop(), CHUNK):
            yield a, {n: np.asarray(v[a : a + CHUNK]) for n, v in arrays.items()}
    elif to == "hdf5":
        import h5py

        with h5py.File(os.path.join(out, "data.h5"), "r") as h:
            rows = {h[n].shape[0] for n in names}
            assert len(rows) == 1, rows
            for a in range(0, rows.pop(), CHUNK):
                got = {n: h[n][a : a + CHUNK] for n in names}
                yield a, ({"text": _text_chunk(list(got["text"]))} if kind == "text" else got)
    elif to == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(os.path.join(out, "data.parquet"))
        a = 0
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=names)
            if kind == "text":
                got = {"text": _arrow_text(t.column("text").combine_chunks())}
            elif kind == "npy":
                got = {"x": t.column("x").combine_chunks().flatten().to_numpy().reshape(t.num_rows, 64)}
            else:
                got = {n: t.column(n).to_numpy() for n in names}
            yield a, got
            a += t.num_rows
        assert a == pf.metadata.num_rows
    else:
        tf = pytest.importorskip(
            "tensorflow", reason="the tf extra is not installed (pip install 'lovecraft-convert[tf]')"
        )
        if kind == "text":
            spec = {"text": tf.io.FixedLenFeature([], tf.string)}
        elif kind == "npy":
            spec = {"x": tf.io.FixedLenFeature([64], tf.float32)}
        else:
            # float64 columns are one bytes value per row (their little-endian values, exact)
            spec = {f"x{i}": tf.io.FixedLenFeature([], tf.string) for i in range(8)}
            spec["label"] = tf.io.FixedLenFeature([], tf.int64)
        a = 0
        d = tf.data.TFRecordDataset(os.path.join(out, "data.tfrecord")).batch(1 << 16)
        for batch in d.map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=2):
            got = {
                n: (tf.io.decode_raw(v, tf.float64) if n.startswith("x") and kind == "csv" else v).numpy()
                for n, v in batch.items()
            }
            got = {n: v.reshape(-1) if kind == "csv" else v for n, v in got.items()}
            if kind == "text":
                got = {"text": _text_chunk(list(got["text"]))}
            yield a, got
            a += _count(got, kind)


def _count(got: dict, kind: str) -> int:
    return len(got["text"][0]) if kind == "text" else len(next(iter(got.values())))


class _Expected:
    """The input's values for any run of rows: the block the test generated (CSV, text: the
    inputs repeat it) or np.load of the NPY input."""

    def __init__(self, kind: str, src: str) -> None:
        self.kind = kind
        if kind == "npy":
            self.npy = np.load(src, mmap_mode="r")
        elif kind == "text":
            block = [line.encode() for line in EXPECTED["text"]]
            self.lens = np.array([len(b) for b in block], dtype=np.int64)
            self.cum = np.concatenate([[0], np.cumsum(self.lens)])
            self.data = b"".join(block)
        else:
            self.block = EXPECTED["csv"]

    def rows(self, a: int, b: int) -> dict[str, object]:
        if self.kind == "npy":
            return {"x": np.asarray(self.npy[a:b])}
        if self.kind == "csv":
            n = len(self.block["label"])
            return {name: col[np.arange(a, b) % n] for name, col in self.block.items()}
        n = len(self.lens)
        (qa, ra), (qb, rb) = divmod(a, n), divmod(b, n)
        if qa == qb:
            joined = self.data[self.cum[ra] : self.cum[rb]]
        else:
            joined = self.data[self.cum[ra] :] + self.data * (qb - qa - 1) + self.data[: self.cum[rb]]
        return {"text": (self.lens[np.arange(a, b) % n], joined)}


def _check_output(out: str, to: str, kind: str, src: str, rows: int) -> None:
    """Every row of the output equals the input's, read back with the format's own reader."""
    expected = _Expected(kind, src)
    count = 0
    for a, got in _chunks(out, to, kind):
        assert a == count
        n = _count(got, kind)
        for name, want in expected.rows(a, a + n).items():
            g = got[name]
            if kind == "text":
                np.testing.assert_array_equal(g[0], want[0], err_msg=f"{to}: line lengths of rows {a}..{a + n}")
                assert g[1] == want[1], f"{to}: the bytes of rows {a}..{a + n} differ"
                continue
            if to == "tfrecord":
                want = (
                    want
                    if want.dtype == np.float64
                    else want.astype(np.float32 if want.dtype.kind == "f" else np.int64)
                )
            assert g.dtype == want.dtype, (name, g.dtype, want.dtype)
            np.testing.assert_array_equal(g, want, err_msg=f"{to}: column {name}, rows {a}..{a + n}")
        count += n
    assert count == rows, f"{to}: the files hold {count} rows, the input {rows}"


def test_numpy_load_of_the_same_npy_is_killed(inputs):
    src, _ = inputs["npy"]
    t0 = time.time()
    r, peak = _capped(sys.executable, "-c", f"import numpy as np; np.load({src!r}).sum()")
    TIMINGS.append(("np.load(...).sum()", time.time() - t0, peak))
    assert r.returncode == 137, (r.returncode, r.stderr[-500:])


def test_zz_timings():
    """Not a check: prints every capped run's time and peak (run with -s to see them)."""
    if not TIMINGS:
        pytest.skip("no capped run happened")
    print(f"\nunder memcap {CAP_MIB} MiB:")
    for name, took, peak in TIMINGS:
        print(f"  {name:<28} {took:6.0f}s  peak {peak} MiB")
