"""``inspect`` of TFRecord files, ours or anyone's: every record's framing and both CRCs checked
(a damaged file is an error naming the record and its byte offset), the ``tf.train.Example``
features of the first records described, and the first records shown when they are not Examples."""

from __future__ import annotations

import os
from typing import Any

from ...errors import InputError
from ...inputs.sources import resolve_inputs
from ...inputs.streams import open_stream
from ...util import format_size, number
from .decode import parse_example
from .framing import iter_records

TFRECORD_EXT = (".tfrecord", ".tfrecords", ".tfrec")
EXAMPLE_SAMPLE = 1000  # records parsed as tf.train.Example to describe the features
PREVIEW = 5  # records shown when they are not Examples


def is_tfrecord(path: str) -> bool:
    low = path.lower()
    for ext in (".gz", ".zlib"):
        if low.endswith(ext):
            low = low[: -len(ext)]
    return low.endswith(TFRECORD_EXT)


def inspect_tfrecord(inputs: list[str], sample: int | None = None, max_expansion: float = 1000.0) -> dict[str, Any]:
    """Records of TFRecord files (``.tfrecord``, ``.tfrecord.gz``): every record's framing and both
    CRCs are checked (a corrupt or cut file is an error naming the record and its byte offset);
    the first records are parsed as ``tf.train.Example`` to describe the features, and shown as
    bytes when they are not Examples. ``sample`` stops after that many records (in all)."""
    others = [p for p in inputs if not is_tfrecord(p)]
    if others:
        raise InputError(f"inputs mix TFRecord files with other formats ({others[0]})", hint="inspect them separately")
    specs = resolve_inputs(inputs, "tfrecord")
    files: list[dict[str, Any]] = []
    features: dict[str, dict[str, Any]] = {}
    parsed = 0
    examples = True
    preview: list[dict[str, Any]] = []
    total = 0
    stopped = False
    for spec in specs:
        n = nbytes = 0
        lo = hi = None
        size = spec.size if spec.compression is None else None
        with open_stream(spec, max_ratio=max_expansion) as f:
            for data in iter_records(f, spec.name, size):
                if sample is not None and total >= sample:
                    stopped = True
                    break
                n += 1
                total += 1
                nbytes += len(data)
                lo = len(data) if lo is None else min(lo, len(data))
                hi = len(data) if hi is None else max(hi, len(data))
                if len(preview) < PREVIEW:
                    preview.append({"file": spec.name, "bytes": len(data), "text": _preview(data)})
                if examples and parsed < EXAMPLE_SAMPLE:
                    try:
                        ex = parse_example(data)
                    except InputError:
                        ex = None
                    if not ex:  # not an Example, or an Example without features: raw records
                        examples = False
                        features = {}
                    else:
                        parsed += 1
                        _tally(features, ex)
        files.append(
            {
                "name": spec.name,
                "path": os.path.abspath(spec.path),
                "compression": spec.compression,
                "size": spec.size,
                "records": n,
                "record_bytes": {"min": lo, "mean": nbytes / n if n else None, "max": hi, "total": nbytes},
            }
        )
        if stopped:
            break
    if total == 0:
        raise InputError(f"{', '.join(s.name for s in specs)}: empty input (no records)", hint="check the file")
    return {
        "kind": "tfrecord",
        "files": files,
        "records": total,
        "records_exact": not stopped,
        "examples": examples,
        "examples_parsed": parsed if examples else 0,
        "features": [{"name": k, **v} for k, v in features.items()] if examples else None,
        "preview": preview,
    }


def _preview(data: bytes, limit: int = 60) -> str:
    text = data[:limit].decode("utf-8", "backslashreplace")
    return text + ("..." if len(data) > limit else "")


def _tally(features: dict[str, dict[str, Any]], ex: dict[str, tuple[str, list]]) -> None:
    for name, (kind, values) in ex.items():
        f = features.setdefault(name, {"kind": kind, "records": 0, "values_min": None, "values_max": None})
        if f["kind"] != kind:
            f["kind"] = "mixed"
        f["records"] += 1
        k = len(values)
        f["values_min"] = k if f["values_min"] is None else min(f["values_min"], k)
        f["values_max"] = k if f["values_max"] is None else max(f["values_max"], k)


def _records(n: int) -> str:
    return f"{number(n)} record" + ("" if n == 1 else "s")


def format_report(r: dict[str, Any]) -> str:
    out = []
    for f in r["files"]:
        comp = f["compression"] or "not compressed"
        rb = f["record_bytes"]
        sizes = (
            f"record bytes {number(rb['min'])}..{number(rb['max'])}, mean {rb['mean']:.1f}"
            if f["records"]
            else "no records"
        )
        out.append(f"{f['name']}: TFRecord, {comp}, {format_size(f['size'])}, {_records(f['records'])} ({sizes})")
    if r["records_exact"]:
        out.append(f"records: {number(r['records'])} (the framing and both CRCs of every record checked)")
    else:
        out.append(f"records: at least {number(r['records'])} (stopped at --sample)")
    if r["examples"]:
        out.append(f"tf.train.Example features (from the first {number(r['examples_parsed'])} records):")
        for f in r["features"]:
            span = f["values_min"] if f["values_min"] == f["values_max"] else f"{f['values_min']}..{f['values_max']}"
            out.append(f"  {f['name']}: {f['kind']}, {span} values per record, in {number(f['records'])} records")
    else:
        out.append("records are not tf.train.Example messages; the first ones:")
        for p in r["preview"]:
            out.append(f"  {p['bytes']} bytes: {p['text']!r}")
    return "\n".join(out) + "\n"
