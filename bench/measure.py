"""Measuring one command for the benchmarks: wall time and peak anonymous memory of its process
tree (RssAnon from /proc, summed over the process and its children)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

BYTECODE_NOTE = (
    "our modules' bytecode is compiled before measuring, as `pip install` does (an editable checkout run "
    "with PYTHONDONTWRITEBYTECODE set, as on this machine, would compile them from source on every run: "
    "~60 ms per command)"
)


def compile_package() -> None:
    """Compile lovecraft_convert's modules to bytecode (``__pycache__``) once, so every command
    measured starts as it does for a user whose install has them (pip compiles on install; Python
    writes them on first import unless PYTHONDONTWRITEBYTECODE is set)."""
    import compileall

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lovecraft_convert")
    compileall.compile_dir(root, quiet=1)


def _anon_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def tree_anon_kib(pid: int) -> int:
    """Anonymous memory (KiB) of ``pid`` and every process below it, now."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _anon_kib(p)
        todo += _children(p)
    return total


@dataclass
class Result:
    seconds: float
    peak_mib: float
    stderr: str = ""


def med(rs: list[Result]) -> float:
    """The median wall time of runs."""
    return statistics.median(r.seconds for r in rs)


def run(cmd: list[str], env: dict | None = None, every: float = 0.004, expect: int = 0) -> Result:
    """Run ``cmd``; wall time and peak anonymous memory of its process tree, sampled from /proc
    every ``every`` seconds (a sample of a tree of threads costs ~0.3 ms of CPU: at 250 Hz that is
    several percent of this 2-core machine, so timed rounds sample at 20 Hz and the memory table's
    own runs at 250 Hz).

    Dirty pages of the previous run are written back first (untimed): lovecraft fsyncs its output
    and would otherwise pay for a peer's unflushed writes.
    """
    os.sync()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    peak = 0
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_anon_kib(p.pid))
            time.sleep(every)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, err = p.communicate()
    dt = time.perf_counter() - t0
    stop.set()
    t.join()
    if p.returncode != expect:
        sys.stderr.write(err.decode(errors="replace")[-3000:])
        raise SystemExit(f"bench: command exited with {p.returncode}, not {expect}: {' '.join(cmd)}")
    return Result(dt, peak / 1024, err.decode(errors="replace"))


def write_repeated(path: str, header: bytes, block: bytes, target: int) -> str:
    """``path``: ``header``, then ``block`` repeated until the file holds ``target`` bytes or more
    (written to a temporary name, then renamed: a cached input is always whole)."""
    with open(path + ".tmp", "wb") as f:
        f.write(header)
        written = len(header)
        while written < target:
            f.write(block)
            written += len(block)
    os.rename(path + ".tmp", path)
    return path
