"""``inspect`` of a dataset directory: everything from its manifest (``verify`` checks it against
the files): format, schema, rows, shards, buckets, sizes, the float16 report, the command that made
it, and the lines of code that load it (each format gives its own)."""

from __future__ import annotations

import json
from typing import Any

from .. import manifest as mf
from ..errors import DatasetError
from ..formats import for_dataset


def inspect_dataset(path: str, manifest: dict | None = None) -> dict[str, Any]:
    """What a dataset directory holds, from its manifest alone (``verify`` checks it against the files)."""
    m = manifest if manifest is not None else mf.read(path)  # given: read from an object store
    where = mf.path_of(path) if manifest is None else f"{path.rstrip('/')}/{mf.MANIFEST_NAME}"
    mf.check_shape(m, where)  # what is shown is what readers would read
    try:
        fmt = for_dataset(m.get("output_format"), path)
    except DatasetError:
        fmt = None
    if fmt is not None:
        mf.check_shape(m, where, fmt.manifest_spec, common=False)
    mf.check_paths(path, m)  # its load snippets would read what they name
    files = [f for f in m.get("files") or [] if isinstance(f, dict)]
    by_path = {f.get("path"): f for f in files}
    shards = []
    units = [(None, s) for s in m.get("shards") or []] or [
        (b.get("index"), sub) for b in m.get("buckets") or [] for sub in (b.get("shards") or [{**b, "index": 0}])
    ]
    for bucket, s in units:
        names = list(s.get("files") or [])
        entry = {
            "index": s.get("index"),
            "rows": s.get("rows"),
            "files": names,
            "bytes": sum(int(by_path.get(n, {}).get("bytes") or 0) for n in names),
        }
        if bucket is not None:  # a bucket's shard: its index within the bucket
            entry["bucket"] = bucket
        shards.append(entry)
    total = sum(int(f.get("bytes") or 0) for f in files)
    report: dict[str, Any] = {
        "kind": "dataset",
        "path": path,
        "format": m.get("output_format"),
        "version": m.get("version"),
        "complete": m.get("complete"),
        "rows": m.get("rows"),
        "schema": m.get("schema"),
        "notes": [n for src in m.get("sources") or [] if isinstance(src, dict) for n in src.get("notes") or []]
        + list(m.get("notes") or []),
        "num_shards": len(shards),
        "shards": shards,
        "buckets": m.get("buckets"),
        "shuffle": m.get("shuffle"),
        "removed": m.get("removed"),
        "bytes": total,
        "files": [
            {k: f.get(k) for k in ("path", "rows", "bytes", *mf.HASHES, "column", "role") if k in f} for f in files
        ],
        "stats": m.get("stats"),
        "float16": m.get("float16") or {},
        "command": m.get("command"),
        "argv": m.get("argv"),
        "options": m.get("options"),
        "sources": m.get("sources"),
        "created_by": m.get("created_by"),
        "created_at": m.get("created_at"),
    }
    for key in (*(fmt.manifest_keys if fmt is not None else ()), "tokenizer", "packing", "bucketing"):
        if m.get(key):
            report[key] = m[key]
    report["load"] = load_snippets(path, m)
    return report


def load_snippets(path: str, m: dict[str, Any]) -> dict[str, str]:
    """The few lines of code that load the dataset, per client library (the format's, then ours)."""
    from ..storage import is_remote

    d = path.rstrip("/") or path
    try:  # most formats' own libraries read local files: a dataset on a store is opened by ours (a local
        # copy), unless the format's libraries stream from the store themselves (``reads_remote``)
        fmt = for_dataset(m.get("output_format"), path)
        out = dict(fmt.load_snippets(d, m)) if not is_remote(d) or fmt.reads_remote else {}
    except DatasetError:
        out = {}
    out["lovecraft"] = (
        f"import lovecraft_convert as lc\n\nds = lc.open_dataset({json.dumps(d)})\nfor batch in ds.batches(256):\n    ...  # dict of NumPy arrays"
    )
    return out
