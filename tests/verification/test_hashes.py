"""Every file's digest is in the manifest under its algorithm's name: BLAKE3 by default, SHA-256
with ``--hash sha256``; both computed here independently, both checked by verify."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from tests.conftest import lovecraft
from tests.readback import digest_of, manifest


@pytest.mark.parametrize("alg", ["blake3", "sha256"])
@pytest.mark.parametrize("fmt", ["memmap", "hdf5", "parquet", "tfrecord"])
def test_digest_per_file_under_its_algorithm(tmp_path, alg, fmt):
    np.save(tmp_path / "x.npy", np.arange(3000, dtype=np.float32).reshape(1000, 3))
    out = str(tmp_path / "out")
    r = lovecraft("shard", str(tmp_path / "x.npy"), "-o", out, "--to", fmt, "--num-shards", "2", "--hash", alg, "-q")
    assert r.exit_code == 0, r.stderr
    m = manifest(out)
    assert m["options"]["hash"] == alg
    for f in m["files"]:
        other = "sha256" if alg == "blake3" else "blake3"
        assert other not in f
        with open(os.path.join(out, f["path"]), "rb") as fh:
            assert f[alg] == digest_of(fh.read(), alg)
    assert lovecraft("verify", out).exit_code == 0
    victim = os.path.join(out, m["files"][-1]["path"])
    with open(victim, "r+b") as fh:
        fh.seek(os.path.getsize(victim) - 1)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 1]))
    r = lovecraft("verify", out)
    assert r.exit_code == 1 and f"{victim}: {alg} " in r.stdout


def test_sha256_digests_check_with_sha256sum(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(100, dtype=np.int64))
    out = str(tmp_path / "out")
    assert (
        lovecraft("convert", str(tmp_path / "x.npy"), "-o", out, "--to", "parquet", "--hash", "sha256", "-q").exit_code
        == 0
    )
    sums = "".join(f"{f['sha256']}  {f['path']}\n" for f in manifest(out)["files"])
    r = subprocess.run(["sha256sum", "-c", "-"], input=sums, text=True, cwd=out, capture_output=True)
    assert r.returncode == 0, r.stdout + r.stderr
