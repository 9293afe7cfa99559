"""The reader fuzzer (fuzz/fuzz_readers.py, ``make fuzz``) runs, quickly and reproducibly: 50 mutated
inputs and datasets with a fixed seed, none of which may crash the library; and its canary: given
a test double of a reader with a planted crash (tests/fuzz_canary.py), it must find and report it,
so a fuzzer that stopped mutating, or stopped reporting, fails here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from lovecraft_convert.errors import LovecraftError
from tests import fuzz_canary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZER = os.path.join(ROOT, "fuzz", "fuzz_readers.py")


def test_fuzz_smoke(tmp_path):
    crashes = tmp_path / "crashes"
    r = subprocess.run(
        [sys.executable, FUZZER, "--iterations", "50", "--seed", "1"] + ["--crashes", str(crashes), "-q"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fuzz: seed 1, 50 cases" in r.stdout, r.stdout
    assert "0 crashes at 0 sites" in r.stdout, r.stdout
    assert not crashes.exists() or os.listdir(crashes) == []


def test_the_canary_is_not_crashing_on_the_seeds(tmp_path):
    """The planted bug needs a mutation: every unmutated seed input reads cleanly (or is refused)."""
    sys.path.insert(0, os.path.join(ROOT, "fuzz"))
    try:
        import fuzz_readers
    finally:
        sys.path.remove(os.path.join(ROOT, "fuzz"))
    csv_seeds = 0
    for name, data in fuzz_readers.input_seeds():
        p = tmp_path / name
        p.write_bytes(data)
        try:
            rows = fuzz_canary.read_csv(str(p))
        except LovecraftError:
            continue
        csv_seeds += name.endswith(".csv")
        assert name.endswith(".csv") or rows == 0
    assert csv_seeds >= 2


def test_fuzzer_finds_the_planted_crash(tmp_path):
    crashes = tmp_path / "crashes"
    r = subprocess.run(
        [sys.executable, FUZZER, "--target", "tests.fuzz_canary:read_csv", "--iterations", "300", "--seed", "1"]
        + ["--crashes", str(crashes), "-q"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    m = re.search(r"fuzz: seed 1, 300 cases .*, (\d+) crashes at (\d+) sites\n", r.stdout)
    assert m and int(m.group(1)) >= 1 and m.group(2) == "1", r.stdout
    site = re.search(r"^\s+\d+\s+(IndexError at fuzz_canary\.py:\d+)$", r.stdout, re.M)
    assert site, r.stdout
    # the crashing inputs were saved, each with its traceback; each still crashes the double
    reports = sorted(p for p in os.listdir(crashes) if p.endswith(".txt"))
    assert reports, os.listdir(crashes)
    for rep in reports:
        text = (crashes / rep).read_text()
        assert f"site: {site.group(1)}\n" in text and "IndexError" in text
        with pytest.raises(IndexError):
            fuzz_canary.read_csv(str(crashes / rep[: -len(".txt")]))
