"""The peers' writers for bench/writers_bench.py, run with the peers' python (``.venv-peers``,
docs/design/peers.md), one writer per process:

    .venv-peers/bin/python bench/writers_peers.py NAME SOURCE.parquet OUT SHARD_BYTES

NAME is ``webdataset`` (``webdataset.ShardWriter``), ``mds`` (``streaming.MDSWriter``) or
``litdata`` (``litdata.optimize`` with a worker per core). Each reads the same Parquet file with
pyarrow, row group by row group, and writes one sample per row: the image bytes as they are, the
label as an integer, the caption as text, in shards of SHARD_BYTES. It prints the rows written.
This file imports nothing of lovecraft: it runs where lovecraft is not installed."""

from __future__ import annotations

import json
import os
import sys


def rows(src: str, group: int | None = None):
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(src)
    groups = range(pf.metadata.num_row_groups) if group is None else [group]
    base = sum(pf.metadata.row_group(g).num_rows for g in range(groups[0])) if group is not None else 0
    for g in groups:
        t = pf.read_row_group(g)
        jpg, label, caption = (
            t.column("jpg").to_pylist(),
            t.column("label").to_pylist(),
            t.column("caption").to_pylist(),
        )
        for i in range(t.num_rows):
            yield base + i, jpg[i], label[i], caption[i]
        base += t.num_rows


def write_webdataset(src: str, out: str, size: int) -> int:
    import webdataset as wds

    n = 0
    with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxsize=size, maxcount=10**9, verbose=0) as w:
        for i, jpg, label, caption in rows(src):
            w.write({"__key__": f"{i:09d}", "jpg": jpg, "cls": label, "json": {"caption": caption}})
            n += 1
    return n


def write_mds(src: str, out: str, size: int) -> int:
    from streaming import MDSWriter

    n = 0
    columns = {"jpg": "bytes", "label": "int64", "caption": "str"}
    with MDSWriter(out=out, columns=columns, compression=None, size_limit=size) as w:
        for _, jpg, label, caption in rows(src):
            w.write({"jpg": jpg, "label": label, "caption": caption})
            n += 1
    return n


def litdata_fn(src: str, group: int):
    for _, jpg, label, caption in rows(src, group):
        yield {"jpg": jpg, "label": label, "caption": caption}


def write_litdata(src: str, out: str, size: int) -> int:
    from functools import partial

    import litdata
    import pyarrow.parquet as pq

    md = pq.ParquetFile(src).metadata
    litdata.optimize(
        fn=partial(litdata_fn, src),
        inputs=list(range(md.num_row_groups)),
        output_dir=out,
        chunk_bytes=size,
        num_workers=os.cpu_count() or 1,
        verbose=False,
    )
    return md.num_rows


if __name__ == "__main__":
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
    name, src, out, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    os.makedirs(out, exist_ok=True)
    n = {"webdataset": write_webdataset, "mds": write_mds, "litdata": write_litdata}[name](src, out, size)
    print(json.dumps({"rows": n}))
