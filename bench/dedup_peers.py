"""datatrove's MinHash near-dedup for bench/dedup_bench.py, run with the peers' python
(``.venv-peers``, docs/design/peers.md):

    .venv-peers/bin/python bench/dedup_peers.py SRC_DIR GLOB WORK RESULT.json

Its four stages, one ``LocalPipelineExecutor`` each, run one after another in this process, with
the settings of ``dedup_bench.py``'s near row: ``MinhashConfig(n_grams=5, num_buckets=14,
hashes_per_bucket=8, seed=1)`` (64-bit xxhash, its default), 2 workers:

1. ``JsonlReader(SRC_DIR, glob_pattern=GLOB)`` + ``MinhashDedupSignature``: 2 tasks (a task reads
   whole files: the corpus is two files);
2. ``MinhashDedupBuckets``: 14 tasks (datatrove requires a multiple of ``num_buckets``);
3. ``MinhashDedupCluster``: 1 task (datatrove requires one);
4. ``JsonlReader`` + ``MinhashDedupFilter(exclusion_writer=JsonlWriter(removed))`` +
   ``ParquetWriter(kept, compression="zstd")``: 2 tasks.

RESULT.json gets, per stage, its wall time and the peak anonymous memory of this process tree
while it ran (sampled from /proc every 50 ms, as bench/measure.py does), and the counts: the
duplicate pairs the buckets found, the documents the clustering marked, the documents the filter
dropped, and the ids of those. Imports nothing of lovecraft (measure.py is the standard library
only)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure import tree_anon_kib  # noqa: E402

WORKERS = 2


class Peak:
    """The peak anonymous memory (MiB) of this process's tree while a block runs."""

    def __enter__(self) -> Peak:
        self.kib = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.kib = max(self.kib, tree_anon_kib(os.getpid()))
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def _size(folder: str, suffix: str) -> int:
    total = 0
    for base, _dirs, names in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(base, n)) for n in names if n.endswith(suffix))
    return total


def _removed_ids(folder: str) -> list[str]:
    ids = []
    for base, _dirs, names in os.walk(folder):
        for n in sorted(names):
            if n.endswith(".jsonl"):
                with open(os.path.join(base, n), encoding="utf-8") as f:
                    ids += [json.loads(line)["id"] for line in f]
    return sorted(ids)


def main() -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import (
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter, ParquetWriter

    src, glob, work, result = sys.argv[1:5]
    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=1)
    stages = [
        ("signature", [JsonlReader(src, glob_pattern=glob), MinhashDedupSignature(f"{work}/sigs", config=config)], 2),
        (
            "buckets",
            [MinhashDedupBuckets(input_folder=f"{work}/sigs", output_folder=f"{work}/buckets", config=config)],
            config.num_buckets,
        ),
        (
            "cluster",
            [MinhashDedupCluster(input_folder=f"{work}/buckets", output_folder=f"{work}/remove", config=config)],
            1,
        ),
        (
            "filter",
            [
                JsonlReader(src, glob_pattern=glob),
                MinhashDedupFilter(
                    input_folder=f"{work}/remove", exclusion_writer=JsonlWriter(f"{work}/removed", compression=None)
                ),
                ParquetWriter(f"{work}/kept", compression="zstd"),
            ],
            2,
        ),
    ]
    out: dict = {"stages": {}}
    for n, (name, pipeline, tasks) in enumerate(stages):
        t0 = time.perf_counter()
        with Peak() as peak:
            LocalPipelineExecutor(
                pipeline=pipeline, tasks=tasks, workers=min(WORKERS, tasks), logging_dir=f"{work}/logs/{n}"
            ).run()
        out["stages"][name] = {"seconds": time.perf_counter() - t0, "peak_mib": peak.kib / 1024, "tasks": tasks}
    out["pairs"] = _size(f"{work}/buckets", ".dups") // 16  # 4 uint32 a pair
    out["marked"] = _size(f"{work}/remove", ".remove") // 4  # a uint32 a document
    out["removed_ids"] = _removed_ids(f"{work}/removed")
    out["removed"] = len(out["removed_ids"])
    with open(result + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f)
    os.rename(result + ".tmp", result)


if __name__ == "__main__":
    main()
