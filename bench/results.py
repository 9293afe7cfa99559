"""`make bench`: run every benchmark, write bench/RESULTS.md, and the README's headline rows from it.

    .venv/bin/python bench/results.py [--quick]     # every bench script, then RESULTS.md and the README
    .venv/bin/python bench/results.py --readme-only # the README's headline table from RESULTS.md as it is

The scripts run one after another (``SCRIPTS``), each printing its tables on stdout, shown as they
come. Only when all of them finish is bench/RESULTS.md replaced: a header naming the machine, the
date, the commit and the time it took, then each script's output as printed. A ``--quick`` run (a
smoke test: inputs 1/16 the size, one round) prints the same and writes nothing.

The README's headline table (between ``<!-- bench:headline`` and ``<!-- bench:end -->``) is made
from the first table of RESULTS.md (one run of ``lovecraft_bench.py``): the rows ``HEADLINE``
names, in that order, those it holds. ``tests/test_docs.py`` checks that the README's table is the
one this makes, so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "RESULTS.md")
README = os.path.join(ROOT, "README.md")
SCRIPTS = [
    "lovecraft_bench.py",
    "loader_bench.py",
    "mixed_loader_bench.py",
    "resume_bench.py",
    "peer_loaders_bench.py",
    "stream_bench.py",
    "ray_bench.py",
    "writers_bench.py",
    "files_bench.py",
    "dedup_bench.py",
]
START = "<!-- bench:headline"
END = "<!-- bench:end -->"

# (benchmark name, a word of the peer): the rows of the README's table, in its order
HEADLINE = [
    ("CSV -> Parquet (zstd), 1046 MB", "polars"),
    ("JSONL -> Parquet (zstd), 1001 MB", "polars"),
    ("JSONL -> Megatron .bin/.idx, BPE 8k + EOS, 110 MB: convert", "datasets"),
    ("NPY f32 -> float16 memmap", "numpy"),
    ("NPY -> HDF5", "durable copy"),
    ("NPY -> TFRecord", "tf.train.Example"),
    ("shard CSV -> TFRecord 128MiB, --workers 2", "--workers 1"),
    ("verify parquet dataset", "sha256sum"),
]


def machine() -> str:
    """CPU model, cores, memory, kernel and Python: what a reader needs to compare runs."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Linux {platform.release()}, Python {platform.python_version()}"
    )


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    except OSError:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def run_script(name: str, extra: list[str]) -> str:
    """Run one bench script; its stdout shown as it comes and returned. A failure stops the run."""
    print(f"bench: {name} ...", file=sys.stderr, flush=True)
    p = subprocess.Popen([sys.executable, os.path.join(HERE, name), *extra], stdout=subprocess.PIPE, text=True)
    out = []
    assert p.stdout is not None
    for line in p.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        out.append(line)
    if p.wait() != 0:
        sys.exit(f"bench: {name} failed (exit {p.returncode}); bench/RESULTS.md left as it was")
    return "".join(out).strip()


class LoadSampler:
    """The 1-minute load average, sampled every 30 s while the scripts run: the machine is shared,
    and a reader of the tables should know how busy it was (ratios are measured in the same run)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(30):
                return

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        s = sorted(self.samples)
        return f"median {s[len(s) // 2]:.1f}, max {s[-1]:.1f} on {os.cpu_count()} cores"


def render(outputs: dict[str, str], seconds: float, load: str = "") -> str:
    lines = [
        "# Benchmark results",
        "",
        f"The last full `make bench` run, as printed: {datetime.date.today()}, commit {commit()}, "
        f"{seconds / 60:.0f} min in all.",
        "",
        f"Machine: {machine()}." + (f" Load average during the run (1 min, every 30 s): {load}." if load else ""),
        "",
        "Regenerated by `make bench` (`bench/results.py`); what the rows measure and how to read them: "
        "docs/benchmarks.md.",
    ]
    for name, text in outputs.items():
        lines += ["", f"## `bench/{name}`", "", text]
    return "\n".join(lines) + "\n"


def _first_table(text: str) -> list[list[str]]:
    """The rows of the first `| benchmark | ours MB/s | peer | ...` table of ``text``, as cells."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("| benchmark | ours MB/s |"):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            if not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def headline(results: str) -> str:
    """The README's table: the ``HEADLINE`` rows of RESULTS.md's first table, fewer columns."""
    rows = _first_table(results)
    out = ["| benchmark | lovecraft MB/s | against | ratio | target |", "|---|---:|---|---:|---:|"]
    for name, peer in HEADLINE:
        for r in rows:
            if r[0] == name and peer in r[2]:
                out.append(f"| {r[0]} | {r[1]} | {r[2]} ({r[3]} MB/s) | {r[4]} | {r[5]} |")
                break
    return "\n".join(out)


def with_headline(readme: str, results: str) -> str:
    """``readme`` with the text between the headline markers replaced by :func:`headline`."""
    i, j = readme.index(START), readme.index(END)
    first = readme.index("\n", i) + 1
    return readme[:first] + "\n" + headline(results) + "\n\n" + readme[j:]


def update_readme() -> None:
    with open(RESULTS, encoding="utf-8") as f:
        results = f.read()
    with open(README, encoding="utf-8") as f:
        readme = f.read()
    new = with_headline(readme, results)
    if new != readme:
        with open(README, "w", encoding="utf-8") as f:
            f.write(new)
        print("bench: README.md's headline table updated from bench/RESULTS.md", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="inputs 1/16 the size, one round; writes nothing")
    ap.add_argument("--readme-only", action="store_true", help="only the README's table, from RESULTS.md")
    a = ap.parse_args()
    if a.readme_only:
        update_readme()
        return
    t0 = time.time()
    sampler = LoadSampler()
    outputs = {name: run_script(name, ["--quick"] if a.quick else []) for name in SCRIPTS}
    load = sampler.stop()
    if a.quick:
        print("bench: --quick: bench/RESULTS.md left as it was", file=sys.stderr)
        return
    tmp = RESULTS + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(render(outputs, time.time() - t0, load))
    os.replace(tmp, RESULTS)
    update_readme()


if __name__ == "__main__":
    main()
