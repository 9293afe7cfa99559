"""Mutation fuzzing of every reader: inputs for ``convert`` and ``inspect``, datasets for ``verify``,
``inspect`` and ``open_dataset``.

Seed inputs (CSV, text, NPY, .gz, .zst, .bz2, .xz, TFRecord files) and seed datasets (one per output
format) are made in memory; each iteration takes one, mutates it (bit flips, byte sets,
truncations, insertions, deletions, duplicated runs, "interesting" bytes such as quotes, commas,
newlines, 0x00 and 0xff) and runs the library on it through the Python API. The library may only
fail with a :class:`~lovecraft_convert.errors.LovecraftError`; anything else is a crash, and so is
a failed conversion that leaves something at the output path or a temporary beside it, a message
on more than one line, or an iteration that hangs. A crash's input is saved under
``fuzz/crashes/`` with a ``.txt`` holding the call and the traceback (the first few of each
distinct crash site).

    python fuzz/fuzz_readers.py --minutes 3            # make fuzz
    python fuzz/fuzz_readers.py --iterations 50 --seed 1 --crashes /tmp/c   # a quick smoke run
    python fuzz/fuzz_readers.py --target tests.fuzz_canary:read_csv --iterations 300 --seed 1   # the canary

``--target MODULE:FUNCTION`` fuzzes that function instead of the library's readers: it is called
with the path of each mutated input file, and any exception but a ``LovecraftError`` is a crash.

Runs are reproducible: the same ``--seed`` and ``--iterations`` give the same inputs.
Exit status: 0 when nothing crashed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import zstandard  # noqa: E402

from lovecraft_convert import convert, inspect, open_dataset, verify  # noqa: E402
from lovecraft_convert.errors import LovecraftError  # noqa: E402

FORMATS = ("memmap", "hdf5", "parquet", "tfrecord")
INTERESTING = [
    b'"',
    b",",
    b"\n",
    b"\r",
    b"\r\n",
    b"\x00",
    b"\xff",
    b"\xef\xbb\xbf",
    b"\t",
    b"-",
    b"9" * 20,
    b"nan",
    b"\x80",
]
HANG_SECONDS = 60
KEEP_PER_SITE = 3


# --------------------------------------------------------------------------------------------
# seeds
# --------------------------------------------------------------------------------------------


def _digest(data: bytes, alg: str) -> str:
    if alg == "sha256":
        return hashlib.sha256(data).hexdigest()
    import blake3

    return blake3.blake3(data).hexdigest()


def _npy(a) -> bytes:
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def input_seeds() -> list[tuple[str, bytes]]:
    """(file name, bytes): the name's extension picks the reader."""
    rng = np.random.default_rng(0)
    csv = b"id,x,name,flag\n" + b"".join(
        b'%d,%.6g,"n %d, ""q""",%d\n' % (i, rng.normal(), i, i % 2) for i in range(200)
    )
    multiline = b'a,b\n1,"two\nlines"\n2,"x"\n3,\n'
    text = "".join(f"line {i} \u00e9\u4e2d {'w' * (i % 17)}\n" for i in range(300)).encode()
    big_csv = b"a,b,c\n" + b"".join(b"%d,%d.5,w%d\n" % (i, i, i) for i in range(90_000))  # > 1 MiB: several pieces
    seeds = [
        ("data.csv", csv),
        ("multi.csv", multiline),
        ("tab.tsv", csv.replace(b",", b"\t")),
        ("corpus.txt", text),
        ("x.npy", _npy(rng.normal(size=(64, 3)).astype(np.float32))),
        ("i.npy", _npy(np.arange(100, dtype=np.int64))),
        ("s.npy", _npy(np.array(["ab", "cde", ""]))),
        ("f.npy", _npy(np.asfortranarray(rng.normal(size=(8, 4))))),
        ("data.csv.gz", gzip.compress(csv, mtime=0)),
        ("corpus.txt.zst", zstandard.ZstdCompressor(write_checksum=True).compress(text)),
        ("data.csv.bz2", bz2.compress(csv)),
        ("corpus.txt.xz", lzma.compress(text)),
        ("x.npy.gz", gzip.compress(_npy(np.arange(50, dtype=np.float64)), mtime=0)),
        ("big.csv", big_csv),
    ]
    return seeds


@dataclass
class DatasetSeed:
    fmt: str
    directory: str  # a complete dataset, copied before each mutation
    data_files: list[str]


def dataset_seeds(work: str) -> list[DatasetSeed]:
    rng = np.random.default_rng(1)
    src = os.path.join(work, "seed_src")
    os.makedirs(src)
    csv = os.path.join(src, "d.csv")
    with open(csv, "w") as f:
        f.write("id,x,name\n")
        for i in range(300):
            f.write(f"{i},{rng.normal():.6g},w{i % 13}\n")
    x = os.path.join(src, "x.npy")
    np.save(x, rng.normal(size=(200, 4)).astype(np.float32))
    txt = os.path.join(src, "t.txt")
    with open(txt, "w") as f:
        f.write("".join(f"{'ab ' * (i % 9)}{i}\n" for i in range(200)))
    out = []
    made = [
        ("memmap", [x], {}),
        ("memmap", [txt], {}),
        ("hdf5", [csv], {}),
        ("parquet", [csv], {}),
        ("tfrecord", [csv], {}),
        ("tfrecord", [x], {"compression": "gzip"}),
    ]
    for k, (fmt, inputs, kw) in enumerate(made):
        d = os.path.join(work, f"seed_ds{k}")
        m = convert(inputs, d, to=fmt, progress=False, **kw)
        out.append(DatasetSeed(fmt, d, [f["path"] for f in m["files"]]))
    return out


# --------------------------------------------------------------------------------------------
# mutations
# --------------------------------------------------------------------------------------------


def mutate(data: bytes, r: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(r.choice([1, 1, 1, 2, 2, 3, 4, 8])):
        op = r.randrange(8)
        n = len(b)
        if n == 0:
            b += r.choice(INTERESTING)
            continue
        i = r.randrange(n)
        if op == 0:  # bit flip
            b[i] ^= 1 << r.randrange(8)
        elif op == 1:  # byte set
            b[i] = r.randrange(256)
        elif op == 2:  # truncate
            del b[r.randrange(n) :]
        elif op == 3:  # insert random bytes
            b[i:i] = bytes(r.randrange(256) for _ in range(r.randrange(1, 9)))
        elif op == 4:  # delete a range
            del b[i : i + r.randrange(1, 64)]
        elif op == 5:  # duplicate a run
            j = min(n, i + r.randrange(1, 128))
            b[j:j] = b[i:j]
        elif op == 6:  # an interesting token
            b[i:i] = r.choice(INTERESTING)
        else:  # overwrite with an interesting token
            t = r.choice(INTERESTING)
            b[i : i + len(t)] = t
    return bytes(b)


# --------------------------------------------------------------------------------------------
# running one case
# --------------------------------------------------------------------------------------------


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"no answer in {HANG_SECONDS} s")


class Crash(Exception):
    """An invariant broken without an exception (leftovers, a message on several lines)."""


def _check_message(e: LovecraftError) -> None:
    if "\n" in e.one_line():
        raise Crash(f"a message on several lines: {e.one_line()!r}")


def run_input(d: str, name: str, data: bytes, r: random.Random, ctx: dict) -> None:
    """Convert and inspect one mutated input in directory ``d`` (``ctx`` gets the call made)."""
    path = os.path.join(d, name)
    ctx.update(name=name, data=data, path=path)
    with open(path, "wb") as f:
        f.write(data)
    to = r.choice(FORMATS)
    kw: dict = {"to": to, "progress": False, "max_memory": "16MiB"}
    if r.random() < 0.2:
        kw["dtype"] = "float16"
        kw["on_overflow"] = r.choice(["error", "clip"])
    if r.random() < 0.2:
        kw["errors"] = "replace"
    if r.random() < 0.1 and name.endswith((".csv", ".tsv")):
        kw["column_types"] = {"id": r.choice(["int64", "string", "float32", "uint8"])}
    if r.random() < 0.1:
        kw["max_expansion"] = r.choice([2.0, 10.0])
    out = os.path.join(d, "out")
    ctx["call"] = f"convert([{name!r}], 'out', **{kw!r}); inspect([{name!r}])"
    before = set(os.listdir(d))
    try:
        convert([path], out, **kw)
        ctx["outcome"] = "converted"
    except LovecraftError as e:
        ctx["outcome"] = "refused"
        _check_message(e)
        if os.path.exists(out):
            raise Crash(f"a failed conversion left {out}") from None
    if set(os.listdir(d)) - before - {"out"}:
        raise Crash(f"left beside the output: {sorted(set(os.listdir(d)) - before - {'out'})}")
    if os.path.exists(out):
        shutil.rmtree(out)
    try:
        inspect([path], progress=False, max_memory="16MiB", errors=kw.get("errors", "strict"))
    except LovecraftError as e:
        _check_message(e)


def run_target(d: str, name: str, data: bytes, target, ctx: dict) -> None:
    """Call ``target`` (``--target``) on one mutated input in directory ``d``."""
    path = os.path.join(d, name)
    ctx.update(name=name, data=data, path=path, call=f"{target.__module__}:{target.__qualname__}({name!r})")
    with open(path, "wb") as f:
        f.write(data)
    try:
        target(path)
        ctx["outcome"] = "converted"
    except LovecraftError as e:
        ctx["outcome"] = "refused"
        _check_message(e)


def _load_target(spec: str):
    import importlib

    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)


def run_dataset(d: str, seed: DatasetSeed, r: random.Random, ctx: dict) -> None:
    """Mutate one data file of a copy of ``seed`` (half the time making the manifest agree with the
    new bytes, so decoding is reached); verify, inspect and read it (``ctx`` gets what was done)."""
    ds = os.path.join(d, "ds")
    shutil.copytree(seed.directory, ds)
    name = r.choice(seed.data_files)
    p = os.path.join(ds, name)
    with open(p, "rb") as f:
        data = mutate(f.read(), r)
    with open(p, "wb") as f:
        f.write(data)
    rehash = r.random() < 0.5
    if rehash:
        mp = os.path.join(ds, "_manifest.json")
        with open(mp) as f:
            m = json.load(f)
        for fr in m["files"]:
            if fr["path"] == name:
                alg = next(a for a in ("blake3", "sha256") if a in fr)
                fr["bytes"], fr[alg] = len(data), _digest(data, alg)
        with open(mp, "w") as f:
            json.dump(m, f)
    ctx.update(
        name=name,
        data=data,
        path=ds,
        call=f"verify/inspect/open_dataset of a {seed.fmt} dataset, {name} mutated, "
        f"manifest {'rehashed' if rehash else 'as written'} (the dataset is saved beside)",
    )
    rep = verify(ds, max_memory="16MiB", progress=False)
    ctx["outcome"] = "verified" if rep.ok else "reported"
    for pr in rep.problems:
        if "\n" in pr.line():
            raise Crash(f"a verify problem on several lines: {pr.line()!r}")
    try:
        inspect(ds)
    except LovecraftError as e:
        _check_message(e)
    try:
        for _ in open_dataset(ds).batches(64):
            pass
    except LovecraftError as e:
        _check_message(e)


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------


def _site(tb) -> str:
    """Where a crash happened: the innermost frame in lovecraft_convert (else the innermost)."""
    frames = traceback.extract_tb(tb)
    ours = [f for f in frames if "lovecraft_convert" in f.filename]
    f = (ours or frames or [None])[-1]
    return f"{os.path.basename(f.filename)}:{f.lineno}" if f else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, help="Run this long (default: until --iterations).")
    ap.add_argument("--iterations", type=int, help="Run this many cases.")
    ap.add_argument("--seed", type=int, default=None, help="Seed of the mutations (default: from the clock).")
    ap.add_argument("--crashes", default=os.path.join(ROOT, "fuzz", "crashes"), help="Where crashing inputs go.")
    ap.add_argument("--datasets", type=float, default=0.3, help="Share of cases that mutate datasets.")
    ap.add_argument(
        "--target", help="MODULE:FUNCTION to fuzz instead of the library's readers (given each input's path)."
    )
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.minutes is None and a.iterations is None:
        a.minutes = 3.0
    seed = a.seed if a.seed is not None else int(time.time())
    r = random.Random(seed)
    deadline = time.time() + a.minutes * 60 if a.minutes is not None else None
    work = tempfile.mkdtemp(prefix="lovecraft-fuzz-")
    old = signal.signal(signal.SIGALRM, _alarm)
    crashes: dict[str, int] = {}
    counts = {"cases": 0, "converted": 0, "refused": 0, "verified": 0, "reported": 0}
    started = time.time()
    target = _load_target(a.target) if a.target else None
    try:
        inputs = input_seeds()
        datasets = dataset_seeds(work) if target is None else []
        i = 0
        while (a.iterations is None or i < a.iterations) and (deadline is None or time.time() < deadline):
            i += 1
            d = os.path.join(work, f"case{i}")
            os.mkdir(d)
            ctx: dict = {"name": "none", "data": b"", "call": "?", "path": None}
            signal.alarm(HANG_SECONDS)
            try:
                if target is not None:
                    name, base = r.choice(inputs)
                    run_target(d, name, mutate(base, r), target, ctx)
                elif r.random() < a.datasets:
                    run_dataset(d, r.choice(datasets), r, ctx)
                else:
                    name, base = r.choice(inputs)
                    run_input(d, name, mutate(base, r), r, ctx)
                counts[ctx["outcome"]] += 1
            except BaseException as e:  # noqa: BLE001 - every other exception is a finding
                if isinstance(e, KeyboardInterrupt) and not isinstance(e, Hang):
                    raise
                site = f"{type(e).__name__} at {_site(e.__traceback__)}"
                n = crashes.get(site, 0) + 1
                crashes[site] = n
                if n <= KEEP_PER_SITE:
                    _save(a.crashes, site, n, ctx, seed, i, e)
                if not a.quiet:
                    print(f"[{i}] CRASH {site}: {str(e).splitlines()[0][:200] if str(e) else ''}", flush=True)
            finally:
                signal.alarm(0)
                shutil.rmtree(d, ignore_errors=True)
            counts["cases"] = i
            if not a.quiet and i % 200 == 0:
                print(f"[{i}] {time.time() - started:.0f}s, {sum(crashes.values())} crashes", flush=True)
    finally:
        signal.signal(signal.SIGALRM, old)
        shutil.rmtree(work, ignore_errors=True)
    took = time.time() - started
    print(
        f"fuzz: seed {seed}, {counts['cases']} cases in {took:.0f}s "
        f"(inputs: {counts['converted']} converted, {counts['refused']} refused; datasets: "
        f"{counts['verified']} verified, {counts['reported']} with problems reported), "
        f"{sum(crashes.values())} crashes at {len(crashes)} sites"
    )
    for site, n in sorted(crashes.items()):
        print(f"  {n:5d}  {site}")
    if crashes:
        print(f"crashing inputs: {a.crashes}")
    return 1 if crashes else 0


def _save(where: str, site: str, n: int, ctx: dict, seed: int, i: int, e: BaseException) -> None:
    os.makedirs(where, exist_ok=True)
    key = hashlib.sha256(site.encode()).hexdigest()[:10]
    base = os.path.join(where, f"{key}-{n}-{os.path.basename(ctx['name'])}")
    with open(base, "wb") as f:
        f.write(ctx["data"])
    if ctx["path"] and os.path.isdir(ctx["path"]):
        shutil.copytree(ctx["path"], base + ".dataset", dirs_exist_ok=True)
    with open(base + ".txt", "w") as f:
        f.write(f"site: {site}\nseed: {seed} iteration: {i}\ncall: {ctx['call']}\ninput: {os.path.basename(base)}\n\n")
        f.write("".join(traceback.format_exception(type(e), e, e.__traceback__)))


if __name__ == "__main__":
    sys.exit(main())
