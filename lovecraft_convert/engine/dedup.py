"""The spill side of ``--dedup exact`` (:mod:`lovecraft_convert.transforms.dedup` says the
algorithm): the scan of a part into hash-partitioned spill files of (digest, position) entries,
the decision of one partition into sorted drop files, and ``--dedup-report``, each in bounded
memory. Spill files are :class:`~.frames.UnitSpill` files, digested (CRC32C) as written and checked
when read, so ``--resume`` redoes what a crash or a disk damaged (:func:`.journal.intact`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import crc32c
import numpy as np

from ..errors import OutputError
from ..schema import Batch, Schema
from ..transforms.dedup import ENTRY, PART_SHIFT, Dedup, DropSet, first_in_batch, row_digests
from .frames import UnitSpill, file_crc

# -- 1. scan ---------------------------------------------------------------------------------------


def scan_part(
    batches: Iterator[Batch], keep, schema: Schema, dedup: Dedup, part: int, spill_dir: str, parts: int
) -> dict[str, Any]:
    """Digest the rows of one part (``batches``, as read) that ``keep`` (a filter's mask function,
    or None) keeps; spill the entries by partition and the rows decided within a batch. Returns
    the fragment: rows ``read``, ``kept`` by the filter, ``local`` duplicates, and the ``files``
    written (``h<part>-b<partition>.bin``: entries; ``l<part>-b0000/1.bin``: positions dropped and
    the positions kept)."""
    entries = UnitSpill(spill_dir, part, parts, prefix="h")
    local = UnitSpill(spill_dir, part, 2, prefix="l")
    base = part << PART_SHIFT
    read = kept = dups = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if keep is not None:
                rows = np.flatnonzero(keep(batch))
                sub = batch.take(rows) if len(rows) < n else batch
            else:
                rows, sub = np.arange(n), batch
            pos = base + read + rows.astype(np.int64)
            read += n
            kept += len(rows)
            if not len(rows):
                continue
            d = row_digests(sub, schema, dedup.columns)
            first = first_in_batch(d)
            dup = first != np.arange(len(first))
            if dup.any():
                local.file(0).write(pos[dup].astype("<i8").tobytes())
                local.file(1).write(pos[first[dup]].astype("<i8").tobytes())
                dups += int(dup.sum())
            uniq = ~dup
            e = np.empty(int(uniq.sum()), dtype=ENTRY)
            e["hi"], e["lo"], e["pos"] = d[uniq, 0], d[uniq, 1], pos[uniq]
            which = (e["hi"] % np.uint64(parts)).astype(np.int64)
            order = np.argsort(which, kind="stable")
            e, which = e[order], which[order]
            cuts = np.searchsorted(which, np.arange(parts + 1))
            for p in range(parts):
                a, b = int(cuts[p]), int(cuts[p + 1])
                if a < b:
                    entries.file(p).write(e[a:b].tobytes())
    finally:
        entries.close()
        local.close()
    files = {name: {"size": size, "crc32c": crc} for _b, name, size, crc in entries.publish()}
    files.update({name: {"size": size, "crc32c": crc} for _b, name, size, crc in local.publish()})
    return {"part": part, "read": read, "kept": kept, "local": dups, "files": files}


# -- 2. decide -------------------------------------------------------------------------------------


def decide_partition(spill_dir: str, partition: int, scans: list[dict]) -> dict[str, Any]:
    """Decide partition ``partition`` from the entries the parts' scans (``scans``: their
    fragments) spilled: the first position of each digest is kept. Writes the dropped positions
    (sorted) and the kept position of each to ``x<partition>-drop.npy`` / ``-kept.npy``."""
    pieces = []
    for s in sorted(scans, key=lambda s: s["part"]):
        name = f"h{s['part']:05d}-b{partition:04d}.bin"
        info = s["files"].get(name)
        if info is None:
            continue
        path = os.path.join(spill_dir, name)
        with open(path, "rb") as f:
            buf = f.read()
        if len(buf) != info["size"] or crc32c.crc32c(buf) != info["crc32c"]:
            raise OutputError(
                "dedup spill file is damaged (its size or CRC32C differs from the journal's)",
                where=path,
                hint="run the same command with --resume: the part that wrote it is read again",
            )
        pieces.append(np.frombuffer(buf, dtype=ENTRY))
        del buf
    e = np.concatenate(pieces) if pieces else np.zeros(0, dtype=ENTRY)
    del pieces
    order = np.lexsort((e["pos"], e["lo"], e["hi"]))
    hi, lo, pos = e["hi"][order], e["lo"][order], e["pos"][order]
    del e, order
    new = np.ones(len(pos), dtype=bool)
    new[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    del hi, lo
    group_first = np.maximum.accumulate(np.where(new, np.arange(len(pos)), 0))
    kept_of = pos[group_first]
    drop, kept = pos[~new], kept_of[~new]
    del kept_of, group_first
    o = np.argsort(drop, kind="stable")
    drop, kept = drop[o], kept[o]
    files = {}
    for suffix, arr in (("drop", drop), ("kept", kept)):
        name = f"x{partition:04d}-{suffix}.npy"
        path = os.path.join(spill_dir, name)
        np.save(path + ".tmp.npy", arr.astype("<i8"))
        os.rename(path + ".tmp.npy", path)
        files[name] = {"size": os.path.getsize(path), "crc32c": file_crc(path)}
    return {"partition": partition, "drops": int(len(drop)), "files": files}


# -- the report ------------------------------------------------------------------------------------

REPORT_WINDOW = 1 << 20  # rows of a part looked at at once when writing the report


def write_report(path: str, spill_dir: str, parts: int, scans: list[dict], names: list[dict]) -> int:
    """Write ``--dedup-report``: one JSON line per dropped row, in input order (``row``: its
    0-based row in the input, every row read counted; ``kept_row``: the row it duplicated; and
    where the part reads one file, ``file`` and ``file_row``, the row within that file). ``names``:
    per part (in order), ``{"file": name or None}``. Written to a temporary name, then renamed;
    returns the lines written."""
    scans = sorted(scans, key=lambda s: s["part"])
    starts, file_starts = {}, {}
    row = 0
    per_file: dict[str, int] = {}
    for s, nm in zip(scans, names, strict=True):
        starts[s["part"]] = row
        f = nm.get("file")
        if f is not None:
            file_starts[s["part"]] = per_file.get(f, 0)
            per_file[f] = per_file.get(f, 0) + s["read"]
        row += s["read"]

    def placed(pos: np.ndarray) -> list[dict]:
        out = []
        for p in pos.tolist():
            part, r = p >> PART_SHIFT, p & ((1 << PART_SHIFT) - 1)
            d = {"row": starts[part] + r}
            f = names[part].get("file") if part < len(names) else None
            if f is not None:
                d.update(file=f, file_row=file_starts[part] + r)
            out.append(d)
        return out

    tmp = path + ".tmp"
    count = 0
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for s in scans:
                p = s["part"]
                drops = DropSet(spill_dir, p, parts)
                base = p << PART_SHIFT
                for a in range(0, max(1, s["read"]), REPORT_WINDOW):
                    d, k = drops.between(base + a, base + min(a + REPORT_WINDOW, s["read"]), with_kept=True)
                    if not len(d):
                        continue
                    k = drops.kept_of(k)
                    for got, was in zip(placed(d), placed(k), strict=True):
                        line = {**got, **{"kept_" + key: v for key, v in was.items()}}
                        out.write(json.dumps(line) + "\n")
                    count += len(d)
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"cannot write the dedup report ({e.strerror})", where=path, hint="check the path") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return count
