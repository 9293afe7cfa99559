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
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import SHARED

pytestmark = pytest.mark.slow

MEMCAP = os.path.join(SHARED, "tools", "memcap")
CAP_MIB = 512
INPUT_BYTES = 4 * CAP_MIB << 20  # each input is at least 4x the cap (2 GiB)
FREE_BYTES = 12 * 10**9
LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]
TIMINGS: list[tuple[str, float, int | None]] = []


def _capped(*cmd: str, timeout: float = 3600) -> tuple[subprocess.CompletedProcess, int | None]:
    r = subprocess.run([MEMCAP, str(CAP_MIB), *cmd], capture_output=True, text=True, timeout=timeout)
    m = re.search(r"memcap: limit \d+ MiB, peak (\d+) MiB, rc (\d+)", r.stderr)
    return r, int(m.group(1)) if m else None


@pytest.fixture(scope="module")
def memcap() -> str:
    if not os.access(MEMCAP, os.X_OK):
        pytest.skip(f"{MEMCAP} not found (../shared/tools/memcap)")
    r = subprocess.run([MEMCAP, "64", "true"], capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip(f"memcap cannot make a memory cgroup here: {r.stderr.strip()}")
    if r.returncode != 0:
        pytest.skip(f"memcap does not work here (rc {r.returncode}): {r.stderr.strip()}")
    return MEMCAP


@pytest.fixture(scope="module")
def inputs(memcap, tmp_path_factory) -> dict[str, tuple[str, int]]:
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

    txt = str(d / "corpus.txt")
    words = np.array(["the", "of", "and", "memory", "bounded", "stream", "shard", "record", "lovecraft", "zstd"])
    lines = [" ".join(words[rng.integers(0, 10, size=int(n))]) for n in rng.integers(1, 40, size=50_000)]
    buf = ("\n".join(lines) + "\n").encode()
    reps = -(-INPUT_BYTES // len(buf))
    with open(txt, "wb") as f:
        for _ in range(reps):
            f.write(buf)
    out["text"] = (txt, len(lines) * reps)
    for p, _ in out.values():
        assert os.path.getsize(p) >= INPUT_BYTES
    print(
        f"\nmemcap inputs ({', '.join(f'{k} {os.path.getsize(p) / 2**30:.2f} GiB' for k, (p, _) in out.items())}) made in {time.time() - t0:.0f}s"
    )
    return out


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
    r = subprocess.run(
        [MEMCAP, str(WIDE_CAP_MIB), LOVECRAFT, "convert", src, "-o", out, "--to", to, "--max-memory", "64MiB", "-q", *extra],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    m = re.search(r"memcap: limit \d+ MiB, peak (\d+) MiB, rc (\d+)", r.stderr)
    TIMINGS.append((f"wide csv -> {to}{' stacked' if stack else ''}", 0.0, int(m.group(1)) if m else None))
    assert r.returncode == 0, f"rc {r.returncode} (137: killed for memory): {r.stderr[-2000:]}"
    from tests.readback import READERS

    got = READERS[to](out)
    if stack:
        np.testing.assert_allclose(np.asarray(got["x"])[:5], head, rtol=1e-6)
    else:
        np.testing.assert_allclose(
            np.column_stack([np.asarray(got[f"c{i}"])[:5] for i in range(2000)]), head, rtol=1e-6
        )


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
