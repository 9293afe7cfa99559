"""The reader fuzzer (fuzz/fuzz_readers.py, ``make fuzz``) runs, quickly and reproducibly: 50 mutated
inputs and datasets with a fixed seed, none of which may crash the library."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fuzz_smoke(tmp_path):
    crashes = tmp_path / "crashes"
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "fuzz", "fuzz_readers.py"), "--iterations", "50", "--seed", "1"]
        + ["--crashes", str(crashes), "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fuzz: seed 1, 50 cases" in r.stdout, r.stdout
    assert "0 crashes at 0 sites" in r.stdout, r.stdout
    assert not crashes.exists() or os.listdir(crashes) == []
