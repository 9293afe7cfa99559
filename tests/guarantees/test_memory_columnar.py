"""Bounded memory with Parquet input: one row group of ~0.5 GB and one of ~1 GB (decoded) convert
under ``--max-memory 64MiB`` with the same peak anonymous memory (sampled from /proc, summed over
the process tree), well under the size of either row group; pyarrow's own reader keeps a fixed
overhead of its own (decoders, page buffers), which the plain ``iter_batches`` loop shows too.
Slow: it writes ~600 MB of Parquet."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tree_anon_kib():
    """The benchmarks' sampler of a process tree's anonymous memory (bench/measure.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lovecraft_measure", os.path.join(ROOT, "bench", "measure.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod.tree_anon_kib


def _peak_mib(cmd: list[str]) -> float:
    tree_anon_kib = _tree_anon_kib()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        peak = max(peak, tree_anon_kib(p.pid))
        time.sleep(0.005)
    assert p.returncode == 0, p.stderr.read().decode()[-2000:]
    return peak / 1024


@pytest.fixture(scope="module")
def row_groups(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("rg")
    rng = np.random.default_rng(1)
    n = 1_500_000
    text = pa.array([("lorem ipsum " * int(k))[: int(k) * 7] for k in rng.integers(1, 60, n)])
    x = pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 32).astype(np.float32)), 32)
    one = pa.table({"text": text, "x": x, "id": pa.array(np.arange(n))})
    paths = []
    for k in (1, 2):
        t = pa.concat_tables([one] * k).combine_chunks()
        p = str(d / f"rg{k}.parquet")
        pq.write_table(t, p, row_group_size=t.num_rows)
        assert pq.ParquetFile(p).metadata.num_row_groups == 1
        paths.append((p, t.nbytes))
    return paths


def test_peak_memory_does_not_grow_with_the_row_group(tmp_path, row_groups):
    baseline = _peak_mib([sys.executable, "-c", "import numpy, pyarrow.parquet, h5py, click, time; time.sleep(0.3)"])
    peaks = []
    for i, (src, decoded) in enumerate(row_groups):
        out = str(tmp_path / f"o{i}")
        cmd = [sys.executable, "-m", "lovecraft_convert", "convert", src, "-o", out, "--to", "memmap", "-q"]
        peak = _peak_mib([*cmd, "--max-memory", "64MiB"]) - baseline
        peaks.append(peak)
        assert peak < decoded / 2**20 / 2, (peak, decoded)
    assert peaks[1] - peaks[0] < 32, peaks  # flat (within sampling noise): twice the row group, the same memory
    assert max(peaks) < 224, peaks
