"""Progress of ``shard`` and ``bucket`` as a person sees it: the real CLI in a subprocess with
stderr on a pseudo-terminal shows the input bytes read (with a rate and an ETA) moving while the
input is split, in-process, by worker processes or by Ray tasks (slow), before the first shard
file exists; then the shards written. With ``--quiet``, or with stderr not a terminal, nothing of
the kind is printed, and ``--json`` keeps stdout clean.

Splitting a test-sized input takes well under a second, too quick to watch. The subprocess (and
every worker it spawns) therefore starts with a ``sitecustomize`` that cuts the text input into
8 MiB parts and sleeps a little per batch read, as a slow disk would, and leaves the first shard's
folder empty for half a second, so that the test sees it: the code under test is the shipped one,
only slower."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass

import numpy as np
import pytest

from lovecraft_convert.engine.journal import JOURNAL, PLAN, SPILL
from lovecraft_convert.engine.meter import PROGRESS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLOW = """
import time
from lovecraft_convert.inputs import text as _text
from lovecraft_convert.jobs import convert as _convert

_lines, _partitions = _text.TextReader._lines, _text.TextReader.partitions


def _slow_lines(self, *args, **kwargs):
    time.sleep(0.3)
    return _lines(self, *args, **kwargs)


def _small_parts(self, target_bytes, mapper=None):
    return _partitions(self, min(target_bytes, 8 << 20), mapper)


def _slow_commit(work, k, make_writer, feed, _commit=_convert.commit_unit):
    def make(folder):
        time.sleep(0.5)  # the first shard's folder is there, nothing in it yet
        return make_writer(folder)

    return _commit(work, k, make if k == 0 else make_writer, feed)


_text.TextReader._lines = _slow_lines
_text.TextReader.partitions = _small_parts
_convert.commit_unit = _slow_commit
"""
SIZE = {"": 1, "k": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# tqdm's line for a bar of bytes: "reading:  33%|###   | 7.88M/22.9M [00:01<00:02, 5.67MB/s]"
READING = re.compile(r"reading:\s+\d+%\|[^|]*\|\s*([\d.]+)([kMG]?)/([\d.]+)([kMG]?) \[([^\]<]*)<([^\],]*), [^\]]*B/s\]")
PHASE1 = {SPILL, JOURNAL, PLAN, PLAN + ".tmp"}  # what the work directory holds before any shard is written


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """24 MB of lines (three 8 MiB parts, 12 batches of 2 MiB), and the slowing sitecustomize."""
    d = tmp_path_factory.mktemp("progress")
    rng = np.random.default_rng(0)
    with open(d / "corpus.txt", "wb") as f:
        while f.tell() < 24_000_000:
            f.write(b"\n".join(b"w " * int(n) for n in rng.integers(1, 100, 20_000)) + b"\n")
    site = d / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW)
    return d


@dataclass
class Seen:
    code: int
    out: str
    err: str  # all of stderr
    before: str | None  # stderr as it was when the first shard file showed up in the work directory
    meters: bool  # the units' byte counts (spill/progress) were seen in the work directory


def _env(corpus, slow: bool) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(corpus / "site"), ROOT] if slow else [ROOT])}


def _piped(corpus, args: list[str], slow: bool = False) -> tuple[int, str, str]:
    """The CLI with stdout and stderr on pipes."""
    cmd = [sys.executable, "-m", "lovecraft_convert", *args]
    p = subprocess.run(cmd, cwd=corpus, env=_env(corpus, slow), capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def _on_terminal(corpus, args: list[str], output: str, slow: bool = True) -> Seen:
    """The CLI with stderr on a pseudo-terminal (stdout on a pipe), writing ``output``; what the
    terminal showed is read as it comes, and kept as it was when the work directory first held
    something of the writing phase (the folder a shard is written in, or a shard file)."""
    cmd = [sys.executable, "-m", "lovecraft_convert", *args]
    work = corpus / f".{output}.partial"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    p = subprocess.Popen(
        cmd, cwd=corpus, env=_env(corpus, slow), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave
    )
    os.close(slave)
    err = b""
    before = None
    meters = False
    deadline = time.monotonic() + 300

    def drain(wait: float) -> bool:
        nonlocal err
        ready, _, _ = select.select([master], [], [], wait)
        if not ready:
            return False
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's last writer is gone
            return False
        err += chunk
        return bool(chunk)

    try:
        while time.monotonic() < deadline:
            got = drain(0.005)
            meters = meters or os.path.isdir(work / SPILL / PROGRESS)
            if before is None:
                try:
                    writing = set(os.listdir(work)) - PHASE1
                except FileNotFoundError:
                    writing = set()
                if writing:
                    while drain(0):  # what the run had written by now
                        pass
                    before = err.decode(errors="replace")
            if not got and p.poll() is not None:
                while drain(0.05):
                    pass
                break
        out = p.stdout.read().decode()
        code = p.wait(timeout=30)
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    return Seen(code, out, err.decode(errors="replace"), before, meters)


def _reading(before: str) -> list[tuple[int, int, str]]:
    """(bytes read, total, ETA) of every 'reading' bar drawn before the first shard was written."""
    seen = []
    for m in READING.finditer(before):
        n, nu, t, tu, _elapsed, eta = m.groups()
        seen.append((int(float(n) * SIZE[nu]), int(float(t) * SIZE[tu]), eta))
    return seen


def _moved(seen: list[tuple[int, int, str]], size: int) -> None:
    """The bars of bytes read: of the input's size, never back, moving while the input is read,
    with an ETA once a rate is known."""
    assert seen
    totals = {t for _, t, _ in seen}
    assert len(totals) == 1 and abs(totals.pop() - size) <= 0.01 * size, seen  # of the input's bytes
    values = [n for n, _, _ in seen]
    assert values == sorted(values), seen  # never back
    moving = [n for n in values if 0 < n < 0.99 * size]
    assert len(set(moving)) >= 2, seen  # read bytes moved while splitting, before any shard
    assert any(re.fullmatch(r"\d\d:\d\d", eta) for n, _, eta in seen if 0 < n < size), seen


@pytest.mark.parametrize("workers", ["2", "1"])
def test_shard_shows_input_bytes_moving_then_shards(corpus, workers):
    size = os.path.getsize(corpus / "corpus.txt")
    out = f"s{workers}"
    args = ["shard", "corpus.txt", "-o", out, "--to", "parquet", "--num-shards", "3", "--workers", workers, "--json"]
    seen = _on_terminal(corpus, args, out)
    assert seen.code == 0, seen.err[-2000:]
    assert json.loads(seen.out)["rows"] > 0  # stdout is the summary only
    assert seen.before is not None, seen.err[-2000:]  # the first shard file was caught in the work directory
    assert seen.meters
    _moved(_reading(seen.before), size)
    assert re.search(r"writing shards:\s+\d+%\|[^|]*\|\s*\d/3 \[", seen.err), seen.err[-2000:]


def test_bucket_shows_input_bytes_moving(corpus):
    size = os.path.getsize(corpus / "corpus.txt")
    args = ["bucket", "corpus.txt", "-o", "b1", "--to", "parquet", "--num-buckets", "4", "--workers", "2", "--json"]
    seen = _on_terminal(corpus, args, "b1")
    assert seen.code == 0, seen.err[-2000:]
    assert json.loads(seen.out)["rows"] > 0
    assert seen.before is not None, seen.err[-2000:]
    _moved(_reading(seen.before), size)


@pytest.mark.parametrize("command", ["shard", "bucket"])
def test_quiet_on_a_terminal_prints_nothing(corpus, command):
    many = ["--num-shards", "3"] if command == "shard" else ["--num-buckets", "4"]
    args = [command, "corpus.txt", "-o", f"q{command}", "--to", "parquet", *many, "--workers", "2", "--quiet"]
    seen = _on_terminal(corpus, args, f"q{command}", slow=False)  # a bar draws itself when made
    assert seen.code == 0 and seen.err == "" and seen.out == "", (seen.out, seen.err)
    assert not seen.meters  # and the units wrote no counts


@pytest.mark.parametrize("command", ["shard", "bucket"])
def test_stderr_not_a_terminal_gets_the_summary_alone(corpus, command):
    many = ["--num-shards", "3"] if command == "shard" else ["--num-buckets", "4"]
    out = f"p{command}"
    code, stdout, err = _piped(corpus, [command, "corpus.txt", "-o", out, "--to", "parquet", *many, "--workers", "2"])
    assert code == 0 and stdout == "", err
    lines = (corpus / "corpus.txt").read_bytes().count(b"\n")
    assert err.startswith(f"wrote {lines:,} rows to {out} (parquet, "), err  # the summary ...
    assert "\r" not in err and "%|" not in err and "B/s" not in err, err  # ... and no bar


@pytest.mark.slow
def test_shard_on_ray_shows_input_bytes_moving(corpus):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'lovecraft-convert[ray]')")
    size = os.path.getsize(corpus / "corpus.txt")
    args = ["shard", "corpus.txt", "-o", "r1", "--to", "parquet", "--num-shards", "3", "--json"]
    seen = _on_terminal(corpus, [*args, "--engine", "ray", "--workers", "2"], "r1")  # a Ray started for the run
    assert seen.code == 0, seen.err[-2000:]
    assert json.loads(seen.out)["rows"] > 0
    assert seen.before is not None and seen.meters, seen.err[-2000:]
    _moved(_reading(seen.before), size)
