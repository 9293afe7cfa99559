"""Deduplication: `lovecraft convert --dedup exact` against polars and DuckDB, and `--dedup near`
against datatrove's MinHash pipeline, on generated JSON Lines with planted duplicates.

    .venv/bin/python bench/dedup_bench.py [--quick] [--exact-mb N] [--near-mb N] [--runs N]
        [--near-runs N] [--only exact,near] [--near-tree DIR] [--workdir DIR]

Sizes: ``--exact-mb`` (default 2000, or ``$LOVECRAFT_BENCH_DEDUP_EXACT_MB``) and ``--near-mb``
(default 1000, or ``$LOVECRAFT_BENCH_DEDUP_NEAR_MB``); ``--quick`` (what ``make bench``'s quick
run passes) takes 1/16 of the exact size, 1/64 of the near one (datatrove's signature stage runs at
~0.1-0.3 MB/s on 2 cores: spaCy's tokenizer, which datatrove runs inside a memory zone, adds every
word of every document to its vocabulary afresh) and one round: ~3 minutes on this 2-core machine
under load. ``--exact-mb 100 --near-mb 10 --runs 1`` takes 1-2 minutes (the inputs, once made,
are cached; making them adds ~10 s per 100 MB). The full sizes take one to two hours, nearly all
of it datatrove's signatures (~0.14 MB/s at a load of 6 on the 2 cores). The inputs
(bench/dedup_inputs.py says what they hold) are generated once with fixed seeds and cached in
``--workdir`` (default ``$BENCH_WORKDIR/dedup`` or /tmp/lovecraft-bench/dedup).

**Exact** (``--runs`` rounds, default 3; the tools alternate their order from round to round; the
input is read once before the rounds, so every tool finds it in the page cache):

* ours: ``lovecraft convert in.jsonl -o OUT --to parquet --dedup exact --dedup-columns text`` (its
  defaults: --max-memory 256MiB, zstd, page checksums, the file hashed and fsynced; the input read
  once when the distinct rows' digests fit an eighth of the budget, as here, else twice), and the
  same without ``--dedup`` as context: what dedup costs on top of the conversion;
* polars, lazy and streaming: ``pl.scan_ndjson(in).unique(subset=["text"], maintain_order=True,
  keep="first").sink_parquet(out)`` (polars' streaming engine runs it: ``is_first_distinct`` and a
  filter, no fallback to the in-memory engine);
* DuckDB: ``COPY (SELECT * FROM read_json(in, format='newline_delimited') QUALIFY row_number()
  OVER (PARTITION BY text ORDER BY id) = 1) TO out (FORMAT parquet, COMPRESSION zstd)``: the first
  occurrence by ``id``, which the generator makes the line number (``read_json`` has no row number
  of its own; a table's ``rowid`` would need the table stored first). Its output is in no
  particular order, where ours and polars' keep the input's. DuckDB and polars may use all the
  memory they want (DuckDB's default limit is 80% of RAM).

Wall time (median of the rounds), peak anonymous memory of the process tree (RssAnon, the largest
seen in any round, sampled every 50 ms), rows kept (ours from the manifest, the peers' from their
Parquet footers). The three must keep the same number of rows, the number of distinct texts the
generator recorded: the script stops if not. Ratios: the peer's time over ours (above 1: we are
faster) and our peak over the peer's.

**Near** (``--near-runs`` rounds, default 1: datatrove takes tens of minutes per GB on 2 cores):
datatrove's four stages (bench/dedup_peers.py, in the peers' venv: time and peak memory per stage,
pairs found, documents removed) against ``lovecraft convert near-00.jsonl near-01.jsonl -o OUT --to
parquet --dedup near --dedup-columns text --threshold 0.8 --ngram 5 --ngram-unit word --bands 14
--band-rows 8 --dedup-seed 1 --dedup-report R``, from this tree or ``--near-tree DIR`` (or
``$LOVECRAFT_NEAR_TREE``), put first on PYTHONPATH; where that tree's ``convert`` does not offer
``--dedup near``, our row says so and datatrove's still runs. Both sides write the removed rows
(datatrove's exclusion writer, our ``--dedup-report``), so the rows each removes are compared:
the overlap of the two sets, and for each tool the share of the planted pairs at Jaccard >= 0.8
(and below) of which it removed one of the two documents.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import dedup_inputs  # noqa: E402
from measure import BYTECODE_NOTE, Result, compile_package, run  # noqa: E402

from tests.peers import PEERS_PYTHON, peer_env  # noqa: E402

PY = sys.executable
TARGET_POLARS = 1.0  # issue 45: >= 1.0x polars at a fraction of its memory
TARGET_DATATROVE = 2.0  # issue 45: >= 2x datatrove
NEAR_FLAGS = [
    "--dedup", "near", "--dedup-columns", "text", "--threshold", "0.8", "--ngram", "5", "--ngram-unit", "word",
    "--bands", "14", "--band-rows", "8",
]  # fmt: skip

POLARS = """
import sys, polars as pl
pl.scan_ndjson(sys.argv[1]).unique(subset=["text"], maintain_order=True, keep="first").sink_parquet(
    sys.argv[2] + "/data.parquet")
"""
DUCKDB = """
import sys, duckdb
src, out = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute(f"SET temp_directory = '{out}/spill'")
con.execute(
    f"COPY (SELECT * FROM read_json('{src}', format = 'newline_delimited') "
    "QUALIFY row_number() OVER (PARTITION BY text ORDER BY id) = 1) "
    f"TO '{out}/data.parquet' (FORMAT parquet, COMPRESSION zstd)")
"""


def log(msg: str) -> None:
    print(f"dedup-bench: {msg}", file=sys.stderr, flush=True)


def ours(tree: str, *args: str) -> tuple[list[str], dict]:
    """Our command, run from ``tree`` whatever the working directory (``-P``: the directory is not
    put before PYTHONPATH)."""
    return [PY, "-P", "-m", "lovecraft_convert", *args], {"PYTHONPATH": tree}


def near_flags(tree: str) -> list[str] | None:
    """Our near row's flags, if ``convert`` in ``tree`` offers ``--dedup near`` (read from its
    --help; the seed is ``--dedup-seed`` where it has one, else ``--seed``); None otherwise."""
    cmd, env = ours(tree, "convert", "--help")
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    m = re.search(r"--dedup \[([^\]]*)\]", r.stdout)
    if not m or "near" not in m.group(1).split("|"):
        return None
    return [*NEAR_FLAGS, "--dedup-seed" if "--dedup-seed" in r.stdout else "--seed", "1"]


def fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


def fresh_dir(path: str) -> str:
    fresh(path)
    os.makedirs(path)
    return path


def warm(*paths: str) -> None:
    """Read the inputs once, so every tool finds them in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


def manifest(out: str) -> dict:
    with open(os.path.join(out, "_manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def parquet_rows(out: str) -> int:
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(os.path.join(out, n)).metadata.num_rows for n in os.listdir(out) if n.endswith(".parquet")
    )


def fmt_s(x: float) -> str:
    return f"{x:.1f} s" if x >= 10 else f"{x:.2f} s"


# --------------------------------------------------------------------------------------------
# exact
# --------------------------------------------------------------------------------------------


def bench_exact(a: argparse.Namespace, mb: float) -> list[str]:
    src = os.path.join(a.workdir, f"exact_{int(mb)}MB.jsonl")
    if not os.path.exists(src):
        log(f"making {src}")
    facts = dedup_inputs.make_exact(src, int(mb * 1e6))
    size = facts["bytes"]
    out = os.path.join(a.workdir, "out")
    tools = {
        "ours": lambda: ours(ROOT, "convert", src, "-o", fresh(f"{out}/ours"), "--to", "parquet", "-q",
                             "--dedup", "exact", "--dedup-columns", "text"),
        "plain": lambda: ours(ROOT, "convert", src, "-o", fresh(f"{out}/plain"), "--to", "parquet", "-q"),
        "polars": lambda: ([PY, "-c", POLARS, src, fresh_dir(f"{out}/polars")], {}),
        "duckdb": lambda: ([PY, "-c", DUCKDB, src, fresh_dir(f"{out}/duckdb")], {}),
    }  # fmt: skip
    names = list(tools)
    times: dict[str, list[float]] = {k: [] for k in names}
    peaks: dict[str, float] = dict.fromkeys(names, 0.0)
    kept: dict[str, int] = {}
    removed, one_pass = 0, False
    warm(src)
    for r in range(a.runs):
        order = names if r % 2 == 0 else names[::-1]
        for k in order:
            cmd, env = tools[k]()
            log(f"exact, round {r + 1}/{a.runs}: {k}")
            res = run(cmd, env=env, every=0.05)
            times[k].append(res.seconds)
            peaks[k] = max(peaks[k], res.peak_mib)
            if k in ("ours", "plain"):
                m = manifest(f"{out}/{k}")
                kept[k] = m["rows"]
                if k == "ours":
                    removed = m["removed"]["duplicate"]["rows"]
                    one_pass = m["removed"]["duplicate"].get("partitions") == 0
            else:
                kept[k] = parquet_rows(f"{out}/{k}")
    shutil.rmtree(out, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    want = facts["distinct"]
    same = kept["ours"] == kept["polars"] == kept["duckdb"] == want
    lines = [
        f"### Exact dedup: {size / 1e6:.0f} MB of JSON Lines, {facts['rows']:,} rows, "
        f"{facts['rows'] - want:,} duplicates planted (median of {a.runs})",
        "",
        f"Load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when the table was made (the machine is "
        "shared: ratios, not seconds, are what to compare).",
        "",
        "| command | time | MB/s | peak memory | rows kept | time ratio (peer / ours) | target | met "
        "| memory (ours / peer) |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]

    def row(label: str, k: str, target: float | None = None) -> str:
        base = f"| {label} | {fmt_s(med[k])} | {size / 1e6 / med[k]:.0f} | {peaks[k]:.0f} MiB | {kept[k]:,} |"
        if k in ("ours", "plain"):
            return base + " | | | |"
        ratio = med[k] / med["ours"]
        tgt, met = (f">= {target:g}x", "yes" if ratio >= target else "NO") if target else ("-", "")
        return base + f" {ratio:.2f}x | {tgt} | {met} | {peaks['ours'] / peaks[k]:.2f}x |"

    lines += [
        row("lovecraft convert --dedup exact --dedup-columns text", "ours"),
        row("polars scan_ndjson.unique(text, maintain_order, keep=first).sink_parquet", "polars", TARGET_POLARS),
        row("DuckDB COPY (... QUALIFY row_number() OVER (PARTITION BY text ORDER BY id) = 1) (no target)", "duckdb"),
        row("context: lovecraft convert without --dedup (every row written)", "plain"),
        "",
        f"Dedup costs {med['ours'] / med['plain']:.2f}x the plain conversion's time "
        f"({med['ours'] - med['plain']:+.1f} s: "
        + (
            "one pass, each row's digest computed and looked up in memory as the rows are written) "
            if one_pass
            else "the input read a second time, the digests spilled and decided) "
        )
        + f"and {peaks['ours'] - peaks['plain']:+.0f} MiB of peak memory; {removed:,} rows removed.",
        f"Rows kept: lovecraft {kept['ours']:,}, polars {kept['polars']:,}, DuckDB {kept['duckdb']:,}, the "
        f"generator's distinct texts {want:,} ({facts['nulls']} null texts among the rows, one kept by each: no text "
        f'is empty, where lovecraft, which holds a null text as "", would keep one row fewer than the peers): '
        + ("the same." if same else "THEY DIFFER."),
        f"Timed runs sample memory every 50 ms; {BYTECODE_NOTE}.",
        "",
    ]
    if not same:
        print("\n".join(lines))
        raise SystemExit("dedup-bench: the tools kept different numbers of rows (see the table)")
    return lines


# --------------------------------------------------------------------------------------------
# near
# --------------------------------------------------------------------------------------------


def report_rows(path: str) -> list[int]:
    with open(path, encoding="utf-8") as f:
        return sorted(json.loads(line)["row"] for line in f if line.strip())


def found(planted: list[list], removed: set[int], low: float, high: float) -> str:
    pairs = [(d, s) for d, s, j in planted if low <= j < high]
    hit = sum(1 for d, s in pairs if d in removed or s in removed)
    return f"{hit / len(pairs):.3f} of {len(pairs):,}" if pairs else "-"


def bench_near(a: argparse.Namespace, mb: float) -> list[str]:
    prefix = os.path.join(a.workdir, f"near_{int(mb)}MB")
    if not os.path.exists(prefix + ".json"):
        log(f"making {prefix}-0[01].jsonl")
    facts = dedup_inputs.make_near(prefix, int(mb * 1e6))
    files, planted = facts["files"], facts["planted"]
    size = facts["bytes"]
    tree = a.near_tree
    flags = near_flags(tree)
    available = flags is not None
    out = os.path.join(a.workdir, "out")
    warm(*files)
    ours_t: list[float] = []
    ours_peak = 0.0
    ours_removed: list[int] = []
    ours_note = ""
    dt: list[dict] = []
    dt_t: list[float] = []
    dt_peak = 0.0
    peers = os.path.exists(PEERS_PYTHON)
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    for r in range(a.near_runs):
        order = ("ours", "datatrove") if r % 2 == 0 else ("datatrove", "ours")
        for who in order:
            if who == "ours" and available:
                log(f"near, round {r + 1}/{a.near_runs}: ours")
                rep = fresh(f"{out}/near-report.jsonl")
                cmd, env = ours(tree, "convert", *files, "-o", fresh(f"{out}/near-ours"), "--to", "parquet", "-q",
                                *flags, "--dedup-report", rep)  # fmt: skip
                res: Result = run(cmd, env=env, every=0.05)
                ours_t.append(res.seconds)
                ours_peak = max(ours_peak, res.peak_mib)
                ours_removed = report_rows(rep)
                dup = manifest(f"{out}/near-ours")["removed"]["duplicate"]
                ours_note = ", ".join(f"{k} {v:,}" for k, v in dup.items() if isinstance(v, int) and k != "rows")
            elif who == "datatrove" and peers:
                log(f"near, round {r + 1}/{a.near_runs}: datatrove")
                work = fresh_dir(f"{out}/near-datatrove")
                result = os.path.join(out, "near-datatrove.json")
                cmd = [PEERS_PYTHON, os.path.join(HERE, "dedup_peers.py"), os.path.dirname(files[0]),
                       os.path.basename(prefix) + "-*.jsonl", work, result]  # fmt: skip
                env = {k: v for k, v in peer_env().items() if os.environ.get(k) != v}
                saved = {k: os.environ.pop(k) for k in drop if k in os.environ}  # the peers' python must not see them
                try:
                    res = run(cmd, env=env, every=0.05)
                finally:
                    os.environ.update(saved)
                dt_t.append(res.seconds)
                dt_peak = max(dt_peak, res.peak_mib)
                with open(result, encoding="utf-8") as f:
                    dt.append(json.load(f))
    shutil.rmtree(out, ignore_errors=True)
    rows = facts["rows"]
    hi = sum(1 for *_, j in planted if j >= 0.8)
    lines = [
        f"### Near dedup: {size / 1e6:.0f} MB of text in 2 JSON Lines files, {rows:,} documents, {len(planted):,} "
        f"copies planted ({hi:,} at word 5-gram Jaccard >= 0.8) ({a.near_runs} round{'s' * (a.near_runs > 1)}"
        f"{', medians' if a.near_runs > 1 else ''})",
        "",
        "MinHash of word 5-grams, 14 bands x 8 rows, threshold 0.8, seed 1. "
        f"Load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores when the table was made.",
        "",
        "| tool | time | MB/s | peak memory | rows removed | planted pairs >= 0.8 found | pairs < 0.8 found "
        "| time ratio (datatrove / ours) | target | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    dt_removed = {int(i[1:]) for i in dt[-1]["removed_ids"]} if dt else set()
    if available and ours_t:
        t = statistics.median(ours_t)
        ratio = f"{statistics.median(dt_t) / t:.2f}x" if dt_t else "-"
        met = ("yes" if statistics.median(dt_t) / t >= TARGET_DATATROVE else "NO") if dt_t else ""
        s = set(ours_removed)
        lines.append(
            f"| lovecraft convert --dedup near | {fmt_s(t)} | {size / 1e6 / t:.1f} | {ours_peak:.0f} MiB | "
            f"{len(s):,} | {found(planted, s, 0.8, 2)} | {found(planted, s, 0, 0.8)} | {ratio} | "
            f">= {TARGET_DATATROVE:g}x | {met} |"
        )
    else:
        lines.append(
            f"| lovecraft convert --dedup near | not available: `convert` in {tree} offers no `--dedup near` "
            "| | | | | | | | |"
        )
    if dt_t:
        t = statistics.median(dt_t)
        lines.append(
            f"| datatrove MinHash, 4 stages, 2 workers | {fmt_s(t)} | {size / 1e6 / t:.1f} | {dt_peak:.0f} MiB | "
            f"{len(dt_removed):,} | {found(planted, dt_removed, 0.8, 2)} | {found(planted, dt_removed, 0, 0.8)} | | | |"
        )
        lines += ["", "datatrove's stages (medians; the peak is the process tree's while the stage ran):", ""]
        lines += ["| stage | tasks | time | peak memory |", "|---|---:|---:|---:|"]
        for name in dt[0]["stages"]:
            st = [d["stages"][name] for d in dt]
            lines.append(
                f"| {name} | {st[0]['tasks']} | {fmt_s(statistics.median(x['seconds'] for x in st))} | "
                f"{max(x['peak_mib'] for x in st):.0f} MiB |"
            )
        stage_sum = statistics.median(sum(x["seconds"] for x in d["stages"].values()) for d in dt)
        lines += [
            "",
            f"datatrove: {dt[-1]['pairs']:,} duplicate pairs from the buckets, {dt[-1]['marked']:,} documents "
            f"marked by the clustering, {dt[-1]['removed']:,} dropped by the filter; its stages took "
            f"{stage_sum:.1f} s of its {statistics.median(dt_t):.1f} s (the rest: Python, datatrove and spaCy "
            "starting).",
        ]
    else:
        lines.append(f"| datatrove MinHash | skipped: no peers' venv at {PEERS_PYTHON} | | | | | | | | |")
    if available and ours_t:
        s = set(ours_removed)
        lines.append(
            f"lovecraft: {ours_note or 'no other counts in the manifest'}. Removed rows: "
            + (
                f"{len(s & dt_removed):,} by both, {len(s - dt_removed):,} by lovecraft alone, "
                f"{len(dt_removed - s):,} by datatrove alone."
                if dt_t
                else "datatrove did not run."
            )  # fmt: skip
        )
    bins = [(0.0, 0.75), (0.75, 0.8), (0.8, 0.85), (0.85, 0.9), (0.9, 1.0), (1.0, 2.0)]
    sets = ([("lovecraft", set(ours_removed))] if available and ours_t else []) + (
        [("datatrove", dt_removed)] if dt_t else []
    )
    if sets:
        lines += [
            "",
            "Planted pairs found, by their word 5-gram Jaccard (computed exactly by the generator):",
            "",
            "| tool | " + " | ".join(f"[{lo:g}, {hi:g})" if hi <= 1 else "1 (exact copies)" for lo, hi in bins) + " |",
            "|---|" + "---:|" * len(bins),
        ]
        lines += [f"| {name} | " + " | ".join(found(planted, s, lo, hi) for lo, hi in bins) + " |" for name, s in sets]
    lines += [
        "",
        "A pair is found when the tool removed either of its documents. datatrove keeps no candidate "
        "check (every pair sharing a band is a duplicate); both sides write the rows they removed "
        "(datatrove's exclusion writer, our --dedup-report), in the timed runs.",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1/16 of the exact size, 1/64 of the near one, one round")
    ap.add_argument("--exact-mb", type=float, default=float(os.environ.get("LOVECRAFT_BENCH_DEDUP_EXACT_MB", 2000)))
    ap.add_argument("--near-mb", type=float, default=float(os.environ.get("LOVECRAFT_BENCH_DEDUP_NEAR_MB", 1000)))
    ap.add_argument("--runs", type=int, default=None, help="exact: timed rounds (default 3; 1 with --quick)")
    ap.add_argument("--near-runs", type=int, default=1, help="near: rounds (default 1)")
    ap.add_argument("--only", default="exact,near", help="exact, near or both")
    ap.add_argument("--near-tree", default=os.environ.get("LOVECRAFT_NEAR_TREE", ROOT), help="the tree of our near row")
    ap.add_argument("--workdir", default=os.environ.get("BENCH_WORKDIR", "/tmp/lovecraft-bench") + "/dedup")
    a = ap.parse_args(argv)
    a.runs = a.runs or (1 if a.quick else 3)
    a.near_tree = os.path.abspath(a.near_tree)
    os.makedirs(a.workdir, exist_ok=True)
    compile_package()
    t0 = time.time()
    only = a.only.split(",")
    lines = []
    if "exact" in only:
        lines += bench_exact(a, a.exact_mb / (16 if a.quick else 1))
    if "near" in only:
        lines += bench_near(a, a.near_mb / (64 if a.quick else 1))
    print(
        f"\nMeasured {datetime.date.today()}; {(time.time() - t0) / 60:.1f} min in all (inputs' generation included).\n"
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
