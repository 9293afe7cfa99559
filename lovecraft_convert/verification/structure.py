"""The manifest's structure, checked before any file is read: ours, a known version, complete, a
known format, a readable schema, file names inside the directory (no absolute paths, no ``..``),
every file of every shard listed, row counts that add up. The result is the list of units (shards,
or buckets' shards) that ``verify`` then decodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import manifest as mf
from ..errors import DatasetError
from ..formats import for_dataset
from ..formats.base import OutputFormat
from ..formats.checking import Unit
from ..schema import Schema

MANIFEST = mf.MANIFEST_NAME


@dataclass
class Structure:
    """What a readable manifest says: format, schema, rows, files by path, units, extra files."""

    fmt: OutputFormat
    schema: Schema
    rows: int
    info: dict[str, dict]
    units: list[Unit] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # files outside ``files`` (the format's own)


def is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def read_structure(m: Any, add) -> Structure | None:
    """The structure of manifest ``m``, or None when it cannot be judged further; every problem
    goes to ``add(file, kind, message)``."""
    for kind, message, _hint in mf.problems(m):
        if kind == "keys":
            continue  # each missing key is reported below, with what it holds instead
        add(MANIFEST, "manifest", message)
        if kind != "incomplete":
            return None
    shape = mf.shape_problems(m)  # every field of the type its readers read it as
    for path, why in shape:
        add(MANIFEST, "manifest", f"{path} {why}")
    if shape:
        return None
    try:
        fmt = for_dataset(m.get("output_format"), MANIFEST)
    except DatasetError:
        add(MANIFEST, "manifest", f"unknown output_format {m.get('output_format')!r}")
        return None
    shape = mf.shape_problems(m, fmt.manifest_spec, common=False)
    for path, why in shape:
        add(MANIFEST, "manifest", f"{path} {why}")
    if shape:
        return None
    try:
        schema = mf.parse_schema(m.get("schema"))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        add(MANIFEST, "manifest", f"unreadable schema ({short(e)})")
        return None
    for message in fmt.manifest_problems(m):
        add(MANIFEST, "manifest", message)
    rows = m.get("rows")
    if not is_count(rows):
        add(MANIFEST, "manifest", f"rows is {rows!r}, not a count")
        return None
    files = m.get("files")
    if not isinstance(files, list):
        add(MANIFEST, "manifest", "lists no files")
        return None
    st = Structure(fmt, schema, rows, _files(files, add))
    if not _units(m, st, add):
        return None
    _extra_files(m, st, add)
    return st


def _files(files: list, add) -> dict[str, dict]:
    info: dict[str, dict] = {}
    for i, f in enumerate(files):
        p = mf.relative_path(f.get("path") if isinstance(f, dict) else None)
        raw = f.get("path") if isinstance(f, dict) else f
        if p is None:
            add(MANIFEST, "manifest", f"files[{i}]: path {raw!r} {mf.OUTSIDE}")
            continue
        if p == MANIFEST:
            add(MANIFEST, "manifest", f"files[{i}]: lists the manifest itself")
            continue
        if p in info:
            add(MANIFEST, "manifest", f"files[{i}]: {p} is listed twice")
            continue
        bad = [k for k in ("bytes", "rows") if not is_count(f.get(k))]
        alg, digest = mf.file_digest(f)
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            bad.append(alg or "digest (" + "/".join(mf.HASHES) + ")")
        if f.get("column") is not None and not isinstance(f.get("column"), str):
            bad.append("column")
        if f.get("role") is not None and not isinstance(f.get("role"), str):
            bad.append("role")
        if bad:
            add(p, "manifest", f"the manifest's entry has no valid {', '.join(bad)}")
        info[p] = f
    return info


def _units(m: dict, st: Structure, add) -> bool:
    buckets = m.get("buckets")
    groups = buckets if buckets else m.get("shards")
    what = "buckets" if buckets else "shards"
    if not isinstance(groups, list) or not groups:
        add(MANIFEST, "manifest", "lists no shards")
        return False
    claimed: set[str] = set()
    for i, s in enumerate(groups):
        if not isinstance(s, dict) or not is_count(s.get("rows")) or not isinstance(s.get("files"), list):
            add(MANIFEST, "manifest", f"{what}[{i}]: no rows or files")
            continue
        label = f"{'bucket' if buckets else 'shard'} {s.get('index', i)}"
        bucket = s if buckets else None
        if bucket is not None and not (is_count(s.get("min_length")) and is_count(s.get("max_length"))):
            add(MANIFEST, "manifest", f"buckets[{i}]: no min_length/max_length")
            bucket = None
        subs = s.get("shards") if buckets else None
        if subs is not None:  # a bucket written as several shards: each is a unit
            if not isinstance(subs, list) or not all(
                isinstance(x, dict) and is_count(x.get("rows")) and isinstance(x.get("files"), list) for x in subs
            ):
                add(MANIFEST, "manifest", f"{what}[{i}]: shards without rows or files")
                continue
            if sum(x["rows"] for x in subs) != s["rows"]:
                add(
                    MANIFEST,
                    "rows",
                    f"{label} has {s['rows']} rows, its shards add up to {sum(x['rows'] for x in subs)}",
                )
            listed = sorted(str(f) for x in subs for f in x["files"])
            if listed != sorted(str(f) for f in s["files"]):
                add(MANIFEST, "manifest", f"{what}[{i}]: its files are not those of its shards")
        else:
            subs = [s]
        for j, sub in enumerate(subs):
            names = _unit_files(st, what, i, sub["files"], add)
            claimed.update(names)
            sub_label = label if len(subs) == 1 else f"{label} shard {sub.get('index', j)}"
            st.units.append(Unit(sub_label, sub["rows"], names, sub.get("stats"), bucket))
    for p in st.info:
        if p not in claimed:
            add(p, "manifest", f"listed in the manifest's files but in none of its {what}")
    total = sum(u.rows for u in st.units)
    if total != st.rows:
        add(MANIFEST, "rows", f"rows is {st.rows}, its {what} add up to {total}")
    for u in st.units:
        counted = [(p, st.info[p].get("rows")) for p in u.files if is_count(st.info[p].get("rows"))]
        per_column = all(st.info[p].get("column") is not None for p, _ in counted)  # each holds every row
        if len(counted) > 1 and not per_column and all(r != u.rows for _, r in counted):
            # the unit's rows split across its files (a wide table's Parquet files)
            total = sum(r for _, r in counted)
            if total != u.rows:
                add(
                    counted[0][0],
                    "manifest",
                    f"the files of {u.label} add up to {total} rows, the manifest says {u.rows}",
                )
            continue
        for p, r in counted:
            if r != u.rows:
                add(p, "manifest", f"the manifest says {r} rows for this file, {u.rows} for its {u.label}")
    return True


def _unit_files(st: Structure, what: str, i: int, files: list, add) -> list[str]:
    names = []
    for raw in files:
        p = mf.relative_path(raw)
        if p is None:
            add(MANIFEST, "manifest", f"{what}[{i}]: path {raw!r} {mf.OUTSIDE}")
            continue
        if p not in st.info:
            add(MANIFEST, "manifest", f"{what}[{i}]: {p} is not in the manifest's files")
            continue
        names.append(p)
    return names


def _extra_files(m: dict, st: Structure, add) -> None:
    """Files the format lists outside ``files`` (an HDF5 bucket index): checked like data files."""
    for key, idx in (st.fmt.extra_files(m) or {}).items():
        p = mf.relative_path(idx.get("path")) if isinstance(idx, dict) else None
        alg, digest = mf.file_digest(idx) if isinstance(idx, dict) else (None, None)
        if p is None or not is_count(idx.get("bytes")) or not isinstance(digest, str):
            add(MANIFEST, "manifest", f"{key}: no valid path, bytes or digest")
            continue
        if p in st.info:
            add(MANIFEST, "manifest", f"{key}: {p} is also listed among the data files")
            continue
        st.info[p] = {"path": p, "bytes": idx["bytes"], alg: digest}
        st.extra.append(p)
