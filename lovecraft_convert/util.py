"""Small shared helpers: sizes, fsync, bounded queues, tracing."""

from __future__ import annotations

import os
import re
import time

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_size(text: str | int) -> int:
    """Parse ``256MiB``, ``1.5GB``, ``4096`` into bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 256MiB, 1GB, 4096)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fsync_path(path: str) -> None:
    """fsync a file or a directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def trim_heap() -> None:
    """Give freed heap back to the system (glibc keeps it otherwise)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


_T0 = time.time()


def trace(msg: str) -> None:
    """Phase timings on stderr when LOVECRAFT_TRACE is set (for benchmarking)."""
    if os.environ.get("LOVECRAFT_TRACE"):
        import sys

        print(f"[{time.time() - _T0:7.2f}s] {msg}", file=sys.stderr, flush=True)


def number(v) -> str:
    """A figure for people: thousands separated, floats to 6 significant digits, None as ``-``."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``n`` things for people: ``1 file``, ``4 files``, ``336,776 rows`` (``plural``: when not word + s)."""
    return f"{number(n)} {word if n == 1 else (plural or word + 's')}"


def remove_entries(directory: str, names: tuple[str, ...]) -> None:
    """Remove the files or directories ``names`` of ``directory`` (a run's scratch: spill, journal,
    plan) where they exist; a symbolic link is removed, never followed."""
    import shutil

    for name in names:
        p = os.path.join(directory, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
