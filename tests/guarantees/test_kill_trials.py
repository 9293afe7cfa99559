"""SIGKILL and SIGINT at seeded random moments of ``convert``, ``shard`` and ``bucket`` runs (subprocesses of
the ``lovecraft`` console script on a ~200 MB CSV).

The invariant after every interruption: the output path is absent, or it holds a dataset that
``lovecraft verify`` passes and that is byte-identical to an uninterrupted run; a leftover
temporary is never mistaken for a dataset (``verify`` refuses it). Then the run is finished: a
resumable command with ``--resume`` (it must end byte-identical to an uninterrupted run, manifests
equal but for times, argv and worker counts), any other command by running it again (the stale
temporary is cleaned); afterwards nothing is left beside the output. A SIGINT (sent to the whole
process group, as a terminal's Ctrl-C is) must end the run with exit 130 and the one-line message
as the whole of stderr (a resumable run's count of committed shards equal to its journal's).

Each trial's delay comes from ``random.Random(seed)`` (between 0.2 s and the measured full-run
time); the seed is in every assertion message. Replay one with ``KILL_TRIAL_SEED=<seed>``.
To cover another command (``bucket``), add its (command, args) cases to CASES, and its name to
RESUMABLE when it has ``--resume``.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import SUBPROCESS_ENV, leftovers
from tests.jobs.test_shard import _digest

pytestmark = pytest.mark.slow

LOVECRAFT = os.path.join(os.path.dirname(sys.executable), "lovecraft")
COMMON = ["-q", "--max-memory", "64MiB"]

# (command, args): adding a command is adding entries here
CASES: list[tuple[str, list[str]]] = [
    ("convert", ["--to", "memmap"]),
    ("convert", ["--to", "hdf5"]),
    ("convert", ["--to", "parquet"]),
    ("convert", ["--to", "tfrecord"]),
    ("shard", ["--to", "parquet", "--num-shards", "6"]),
    ("shard", ["--to", "parquet", "--num-shards", "6", "--shuffle", "--seed", "7", "--workers", "2"]),
    ("shard", ["--to", "tfrecord", "--shard-size", "32MiB", "--workers", "2"]),
    ("shard", ["--to", "tfrecord", "--num-shards", "5", "--shuffle", "--seed", "3", "--workers", "1"]),
    ("shard", ["--to", "hdf5", "--num-shards", "4", "--workers", "2"]),
    ("shard", ["--to", "hdf5", "--rows-per-shard", "500000", "--shuffle", "--seed", "11", "--workers", "2"]),
    ("bucket", ["--to", "memmap", "--ragged", "--num-buckets", "4", "--workers", "2"]),
    (
        "bucket",
        ["--to", "tfrecord", "--ragged", "--boundaries", "4,8", "--num-shards", "3", "--shuffle", "--seed", "5"],
    ),
    ("bucket", ["--to", "parquet", "--ragged", "--num-buckets", "2", "--layout", "ragged", "--workers", "1"]),
]
RESUMABLE = {"shard", "bucket"}  # commands with --resume
KILL_TRIALS = 2  # per case: 26 SIGKILL trials
SIGINT_CASES = [2, 5, 9, 10, 11]  # indexes into CASES: convert, shard and bucket, with workers
IGNORED_IN_MANIFEST = ("created_at", "argv", "seconds", "workers")


def _case_id(case: tuple[str, list[str]]) -> str:
    return " ".join([case[0], *case[1]]).replace("--", "")


def _seeds(index: int, trials: int, salt: int) -> list[int]:
    if os.environ.get("KILL_TRIAL_SEED"):
        return [int(os.environ["KILL_TRIAL_SEED"])]
    return [salt + 100 * index + t for t in range(trials)]


KILL_PARAMS = [
    pytest.param(i, seed, id=f"{_case_id(c)} seed={seed}")
    for i, c in enumerate(CASES)
    for seed in _seeds(i, KILL_TRIALS, 10_000)
]
SIGINT_PARAMS = [
    pytest.param(i, seed, id=f"{_case_id(CASES[i])} seed={seed}") for i in SIGINT_CASES for seed in _seeds(i, 1, 20_000)
]


# --------------------------------------------------------------------------------------------
# the input and the uninterrupted references
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory) -> Iterator[str]:
    """~200 MB: an id, six floats and a label, 100,000 generated rows repeated (quick to write)."""
    d = tmp_path_factory.mktemp("kill_in")
    rng = np.random.default_rng(0)
    n = 100_000
    buf = io.StringIO()
    block = np.column_stack([np.arange(n), rng.normal(size=(n, 6)), rng.integers(0, 10, n)])
    np.savetxt(buf, block, fmt=["%d"] + ["%.7f"] * 6 + ["%d"], delimiter=",")
    data = buf.getvalue().encode()
    p = str(d / "big.csv")
    with open(p, "wb") as f:
        f.write(b"id,x0,x1,x2,x3,x4,x5,label\n")
        for _ in range(-(-(200 << 20) // len(data))):
            f.write(data)
    yield p
    shutil.rmtree(d, ignore_errors=True)


def _argv(case, src: str, out: str, *extra: str) -> list[str]:
    command, args = case
    return [LOVECRAFT, command, src, "-o", out, *args, *COMMON, *extra]


def _manifest(out: str) -> dict:
    with open(os.path.join(out, "_manifest.json")) as f:
        m = json.load(f)
    for k in IGNORED_IN_MANIFEST:
        m.pop(k, None)
    opts = m.get("options") or {}
    for k in ("workers", "resume"):
        opts.pop(k, None)
    return m


@pytest.fixture(scope="module")
def references(big_csv, tmp_path_factory):
    """Per case, lazily: (seconds, file digests, manifest) of an uninterrupted run."""
    cache: dict[int, tuple[float, dict, dict]] = {}
    base = tmp_path_factory.mktemp("kill_ref")

    def get(i: int) -> tuple[float, dict, dict]:
        if i not in cache:
            out = str(base / f"ref{i}")
            t0 = time.time()
            r = subprocess.run(
                _argv(CASES[i], big_csv, out), capture_output=True, text=True, timeout=600, env=SUBPROCESS_ENV
            )
            took = time.time() - t0
            assert r.returncode == 0, r.stderr
            cache[i] = (took, _digest(out), _manifest(out))
            shutil.rmtree(out)  # only its digests are compared: 16 references would hold 3 GB of disk
            print(f"\nreference {_case_id(CASES[i])}: {took:.1f}s")
        return cache[i]

    return get


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _group_alive(pgid: int) -> list[int]:
    """Processes of the group that are not zombies (orphaned workers may outlive a killed parent)."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(pid))
    return alive


def _wait_group(pgid: int, why: str, timeout: float = 20.0) -> None:
    t0 = time.time()
    while _group_alive(pgid) and time.time() - t0 < timeout:
        time.sleep(0.05)
    left = _group_alive(pgid)
    if left:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"{why}: processes {left} still running {timeout:.0f}s after the parent died"


def _interrupt(case, src: str, out: str, delay: float, sig: int) -> subprocess.Popen:
    p = subprocess.Popen(
        _argv(case, src, out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=SUBPROCESS_ENV,
    )
    time.sleep(delay)
    if sig == signal.SIGKILL:
        p.send_signal(sig)  # the main process only, as `kill -9 PID` or the OOM killer does
    else:
        try:
            os.killpg(p.pid, sig)  # the whole group, as Ctrl-C in a terminal does
        except ProcessLookupError:
            pass
    p.stdout_text, p.stderr_text = p.communicate(timeout=600)
    return p


def _check_invariant(d: str, out: str, ref_digest: dict, why: str) -> None:
    """The output is absent or complete and right; a leftover temporary never passes for a dataset."""
    if os.path.exists(out):
        r = subprocess.run([LOVECRAFT, "verify", out, "-q"], capture_output=True, text=True, env=SUBPROCESS_ENV)
        assert (r.returncode, r.stdout) == (0, ""), f"{why}: a dataset at the output that verify refuses: {r.stdout}"
        assert _digest(out) == ref_digest, f"{why}: a complete-looking output that differs from an uninterrupted run"
    for name in leftovers(d):
        p = os.path.join(d, name)
        if os.path.isdir(p):
            r = subprocess.run([LOVECRAFT, "verify", p, "-q"], capture_output=True, text=True, env=SUBPROCESS_ENV)
            assert r.returncode != 0, f"{why}: the leftover {name} passes verify as a dataset"
    assert sorted(n for n in os.listdir(d) if not n.startswith(".")) in ([], ["out"]), f"{why}: {os.listdir(d)}"


def _finish(case, src: str, d: str, out: str, ref, why: str) -> None:
    """Complete the interrupted run; then it must equal the uninterrupted one, with nothing beside it."""
    _, ref_digest, ref_manifest = ref
    command = case[0]
    if not os.path.exists(out):
        extra = ["--resume"] if command in RESUMABLE else []
        r = subprocess.run(
            _argv(case, src, out, *extra), capture_output=True, text=True, timeout=600, env=SUBPROCESS_ENV
        )
        assert r.returncode == 0, f"{why}: finishing with {extra or 'a new run'} failed: {r.stderr[-2000:]}"
    assert _digest(out) == ref_digest, f"{why}: files differ from an uninterrupted run"
    assert _manifest(out) == ref_manifest, f"{why}: manifest differs from an uninterrupted run"
    assert leftovers(d) == [], f"{why}: stale temporaries after finishing: {leftovers(d)}"


# --------------------------------------------------------------------------------------------
# the trials
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("index, seed", KILL_PARAMS)
def test_sigkill_trial(tmp_path, big_csv, references, index, seed):
    case = CASES[index]
    ref = references(index)
    delay = random.Random(seed).uniform(0.2, ref[0])
    why = f"SIGKILL trial seed={seed} ({_case_id(case)}) at {delay:.2f}s of {ref[0]:.2f}s"
    d = str(tmp_path)
    out = os.path.join(d, "out")
    p = _interrupt(case, big_csv, out, delay, signal.SIGKILL)
    assert p.returncode in (0, -signal.SIGKILL), f"{why}: rc {p.returncode}: {p.stderr_text[-2000:]}"
    _wait_group(p.pid, why)
    print(f"\n{why}: {'a complete output' if os.path.exists(out) else 'no output'}, left {leftovers(d)}")
    _check_invariant(d, out, ref[1], why)
    _finish(case, big_csv, d, out, ref, why)


@pytest.mark.parametrize("index, seed", SIGINT_PARAMS)
def test_sigint_trial(tmp_path, big_csv, references, index, seed):
    case = CASES[index]
    ref = references(index)
    delay = random.Random(seed).uniform(0.2, ref[0])
    why = f"SIGINT trial seed={seed} ({_case_id(case)}) at {delay:.2f}s of {ref[0]:.2f}s"
    d = str(tmp_path)
    out = os.path.join(d, "out")
    p = _interrupt(case, big_csv, out, delay, signal.SIGINT)
    _wait_group(p.pid, why)
    if p.returncode == 0:  # finished before the signal
        assert p.stderr_text == "", why
    else:
        assert p.returncode == 130, f"{why}: rc {p.returncode}: {p.stderr_text[-2000:]}"
        assert p.stdout_text == "", f"{why}: stdout {p.stdout_text[-2000:]!r}"
        if case[0] in RESUMABLE:
            what = "bucket shard" if case[0] == "bucket" else "shard"
            want = re.compile(
                rf"Error: interrupted; (\d+) {what}s? committed in {re.escape(d)}/\.out\.partial; "
                r"run the same command with --resume to finish, or --overwrite to start over\n"
            )
        else:
            want = re.compile(rf"Error: interrupted; nothing was written to {re.escape(out)}\n")
        m = want.fullmatch(p.stderr_text)  # the whole of stderr: that one line and nothing else
        assert m, f"{why}: stderr is not the one line: {p.stderr_text[-2000:]!r}"
        if case[0] in RESUMABLE:  # the count it gives is the journal's
            with open(os.path.join(d, ".out.partial", "journal.jsonl")) as f:
                committed = sum(1 for line in f if json.loads(line).get("phase") == 2)
            assert int(m.group(1)) == committed, f"{why}: says {m.group(1)} committed, the journal {committed}"
        print(f"\n{why}: rc 130, one line on stderr, left {leftovers(d)}")
        assert not os.path.exists(out), why
    _check_invariant(d, out, ref[1], why)
    _finish(case, big_csv, d, out, ref, why)
