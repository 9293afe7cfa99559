"""The spill side of ``--dedup exact`` (:mod:`lovecraft_convert.transforms.dedup` says the
algorithm): the scan of a part into runs of (digest, position) entries sorted by fine hash
partition, the grouping of fine partitions into decisions that fit the budget (from the counts the
scans wrote, so a skewed or mis-estimated input still fits), the decision of one group into sorted
drop files, and ``--dedup-report``, each in bounded memory, with a bounded number of files (four
per part, two per group) whatever the input's size. Spill files are :class:`~.frames.UnitSpill` files, digested (CRC32C) as written and checked
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
from ..transforms.dedup import ENTRY, FINE, FINE_BITS, PART_SHIFT, Dedup, DropSet, first_in_batch, row_digests
from .frames import UnitSpill, file_crc

# -- 1. scan ---------------------------------------------------------------------------------------


def scan_part(
    batches: Iterator[Batch], keep, schema: Schema, dedup: Dedup, part: int, spill_dir: str, run_entries: int
) -> dict[str, Any]:
    """Digest the rows of one part (``batches``, as read) that ``keep`` (a filter's mask function,
    or None) keeps; spill the entries and the rows decided within a batch. Returns the fragment:
    rows ``read``, ``kept`` by the filter, ``local`` duplicates, the ``runs`` written and the
    ``files`` (``h<part>-b0000.bin``: the entries, ``-b0001.bin``: the runs' index;
    ``l<part>-b0000/1.bin``: positions dropped within a batch and the positions they repeat).

    Entries are held up to ``run_entries`` at a time, then written as one *run* sorted by fine
    partition (:data:`~lovecraft_convert.transforms.dedup.FINE` of them, by the digest's top bits);
    the index row of a run holds the cumulative entry offsets of its fine partitions (FINE + 1) and
    the CRC32C of each one's bytes (FINE), so a decision reads and checks just its partitions."""
    runs = RunWriter(spill_dir, part, run_entries)
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
            runs.add(e)
        runs.flush()
    finally:
        runs.close()
        local.close()
    files = runs.publish()
    files.update({name: {"size": size, "crc32c": crc} for _b, name, size, crc in local.publish()})
    return {"part": part, "read": read, "kept": kept, "local": dups, "runs": runs.runs, "files": files}


class RunWriter:
    """A part's (key, position) entries (:data:`~lovecraft_convert.transforms.dedup.ENTRY`), held up
    to ``run_entries`` at a time, then written as one *run* sorted by fine partition
    (:data:`~lovecraft_convert.transforms.dedup.FINE` of them, by the key's top bits) to
    ``h<part>-b0000.bin``; the index row of a run (``-b0001.bin``) holds the cumulative entry offsets
    of its fine partitions (FINE + 1) and the CRC32C of each one's bytes (FINE), so a decision reads
    and checks just its partitions (:func:`entries`). Shared by the exact and near modes."""

    def __init__(self, spill_dir: str, part: int, run_entries: int) -> None:
        self.spill = UnitSpill(spill_dir, part, 2, prefix="h")
        self.limit = run_entries
        self.held: list[np.ndarray] = []
        self.count = 0
        self.written = 0
        self.runs = 0

    def add(self, e: np.ndarray) -> None:
        """Hold entries ``e``; write a run once the entries held reach the limit."""
        self.held.append(e)
        self.count += len(e)
        if self.count >= self.limit:
            self.flush()

    def flush(self) -> None:
        """Write the entries held as one run (nothing when none are held)."""
        if not self.held:
            return
        e = np.concatenate(self.held)
        self.held.clear()
        self.count = 0
        fine = fine_of(e["hi"])
        e = e[np.argsort(fine, kind="stable")]
        counts = np.bincount(fine, minlength=FINE)
        ends = np.cumsum(counts)
        raw = memoryview(e.tobytes())
        crcs = np.zeros(FINE, dtype=np.int64)
        size = ENTRY.itemsize
        for f in np.flatnonzero(counts).tolist():
            crcs[f] = crc32c.crc32c(raw[int(ends[f] - counts[f]) * size : int(ends[f]) * size])
        self.spill.file(0).write(raw)
        offsets = self.written + np.concatenate([[0], ends]).astype(np.int64)
        self.spill.file(1).write(np.concatenate([offsets, crcs]).astype("<i8").tobytes())
        self.written += len(e)
        self.runs += 1

    def close(self) -> None:
        self.spill.close()

    def publish(self) -> dict[str, dict]:
        """The files written (renamed to their final names): name -> size and CRC32C."""
        return {name: {"size": size, "crc32c": crc} for _b, name, size, crc in self.spill.publish()}


def fine_of(hi: np.ndarray) -> np.ndarray:
    """The fine partition of each digest (its top bits)."""
    return (hi >> np.uint64(64 - FINE_BITS)).astype(np.int64)


# -- 2. decide -------------------------------------------------------------------------------------

INDEX_ROW = 2 * FINE + 1  # int64 values per run in a part's index: offsets (FINE + 1), then CRCs (FINE)


def _damaged(path: str, what: str) -> OutputError:
    return OutputError(
        f"dedup spill file {what}",
        where=path,
        hint="run the same command with --resume: the part that wrote it is read again",
    )


def _index_file(spill_dir: str, scan: dict) -> tuple[str, dict] | None:
    name = f"h{scan['part']:05d}-b0001.bin"
    info = scan["files"].get(name)
    return (os.path.join(spill_dir, name), info) if info is not None else None


def plan_groups(spill_dir: str, scans: list[dict], cap_entries: int) -> list[list[int]]:
    """Consecutive fine partitions grouped so that each group's entries (counted from the parts'
    indexes, each checked against its CRC32C) are at most ``cap_entries``, or one fine partition:
    the decision units. Depends only on the input and the options."""
    totals = np.zeros(FINE, dtype=np.int64)
    for s in scans:
        got = _index_file(spill_dir, s)
        if got is None:
            continue
        path, info = got
        crc = size = 0
        with open(path, "rb") as f:  # 64 runs at a time: a convert's one part may have thousands
            while buf := f.read(64 * INDEX_ROW * 8):
                crc, size = crc32c.crc32c(buf, crc), size + len(buf)
                if len(buf) % (INDEX_ROW * 8):
                    raise _damaged(path, "is cut short")
                idx = np.frombuffer(buf, dtype="<i8").reshape(-1, INDEX_ROW)
                totals += np.diff(idx[:, : FINE + 1], axis=1).sum(axis=0)
        if size != info["size"] or crc != info["crc32c"]:
            raise _damaged(path, "is damaged (its size or CRC32C differs from the journal's)")
    groups: list[list[int]] = []
    lo, held = 0, 0
    for f in range(FINE):
        n = int(totals[f])
        if f > lo and held + n > cap_entries:
            groups.append([lo, f])
            lo, held = f, 0
        held += n
    groups.append([lo, FINE])
    return groups


def entries(spill_dir: str, scan: dict, lo: int, hi: int) -> Iterator[np.ndarray]:
    """The entries of fine partitions [lo, hi) in each run of one part's scan, checked."""
    got = _index_file(spill_dir, scan)
    if got is None:
        return
    ipath, _ = got
    path = ipath[: -len("b0001.bin")] + "b0000.bin"
    size = ENTRY.itemsize
    total = os.path.getsize(path) // size
    with open(ipath, "rb") as fi, open(path, "rb") as fe:
        for r in range(scan["runs"]):
            fi.seek((r * INDEX_ROW + lo) * 8)
            offs = np.frombuffer(fi.read((hi - lo + 1) * 8), dtype="<i8")
            fi.seek((r * INDEX_ROW + FINE + 1 + lo) * 8)
            crcs = np.frombuffer(fi.read((hi - lo) * 8), dtype="<i8")
            if len(offs) != hi - lo + 1 or len(crcs) != hi - lo or (np.diff(offs) < 0).any() or offs[-1] > total:
                raise _damaged(ipath, f"is damaged (run {r})")
            a, b = int(offs[0]), int(offs[-1])
            if a == b:
                continue
            fe.seek(a * size)
            raw = fe.read((b - a) * size)
            if len(raw) != (b - a) * size:
                raise _damaged(path, "is cut short")
            mv = memoryview(raw)
            for k in np.flatnonzero(np.diff(offs)).tolist():
                x, y = int(offs[k] - a) * size, int(offs[k + 1] - a) * size
                if crc32c.crc32c(mv[x:y]) != int(crcs[k]):
                    raise _damaged(path, f"is damaged (the entries of partition {lo + k} differ from their CRC32C)")
            yield np.frombuffer(raw, dtype=ENTRY)


def decide_partition(spill_dir: str, group: int, lo: int, hi: int, scans: list[dict]) -> dict[str, Any]:
    """Decide group ``group`` (fine partitions [lo, hi)) from the entries the parts' scans
    (``scans``: their fragments) spilled: the first position of each digest is kept. Writes the
    dropped positions (sorted) and the kept position of each to ``x<group>-drop.npy`` /
    ``-kept.npy``."""
    pieces = []
    for s in sorted(scans, key=lambda s: s["part"]):
        pieces.extend(entries(spill_dir, s, lo, hi))
    e = np.concatenate(pieces) if pieces else np.zeros(0, dtype=ENTRY)
    del pieces
    order = np.lexsort((e["pos"], e["lo"], e["hi"]))
    hi_, lo_, pos = e["hi"][order], e["lo"][order], e["pos"][order]
    del e, order
    new = np.ones(len(pos), dtype=bool)
    new[1:] = (hi_[1:] != hi_[:-1]) | (lo_[1:] != lo_[:-1])
    del hi_, lo_
    group_first = np.maximum.accumulate(np.where(new, np.arange(len(pos)), 0))
    kept_of = pos[group_first]
    drop, kept = pos[~new], kept_of[~new]
    del kept_of, group_first
    o = np.argsort(drop, kind="stable")
    drop, kept = drop[o], kept[o]
    files = {}
    for suffix, arr in (("drop", drop), ("kept", kept)):
        name = f"x{group:04d}-{suffix}.npy"
        path = os.path.join(spill_dir, name)
        np.save(path + ".tmp.npy", arr.astype("<i8"))
        os.rename(path + ".tmp.npy", path)
        files[name] = {"size": os.path.getsize(path), "crc32c": file_crc(path)}
    return {"partition": group, "drops": int(len(drop)), "files": files}


def decide_here(spill_dir: str, scans: list[dict], cap_entries: int) -> int:
    """Plan the groups and decide them all in this process (``convert``, ``verify``); returns
    their number (the drop set's)."""
    groups = plan_groups(spill_dir, scans, cap_entries)
    for k, (lo, hi) in enumerate(groups):
        decide_partition(spill_dir, k, lo, hi, scans)
    return len(groups)


# -- the report ------------------------------------------------------------------------------------

REPORT_WINDOW = 1 << 14  # rows of a part looked at at once when writing the report (a line is a dict meanwhile)


def check_report(report: str | None, output: str, inputs: list[str]) -> None:
    """Refuse (before any work) a ``--dedup-report`` that would overwrite an input of the run, lie
    inside its output (which the commit replaces: the report would vanish with the old directory,
    or break the commit) or is a directory; OptionsError, exit 2."""
    if not report:
        return
    from ..errors import OptionsError
    from ..storage import is_remote
    from ..storage.overlap import inside, same_file

    for p in inputs:
        if p and not is_remote(p) and os.path.exists(p) and same_file(p, report):
            raise OptionsError(f"--dedup-report {report}: is an input of this run", hint="name another file")
    if output and not is_remote(output) and inside(report, output):
        raise OptionsError(
            f"--dedup-report {report}: is inside the output {output}, which this run replaces",
            hint="name a file outside it",
        )
    where = os.path.dirname(os.path.abspath(report))
    if not os.path.isdir(where):  # (after the output's check: a report inside an output to be made)
        raise OptionsError(f"--dedup-report {report}: no directory {where}", hint="create it, or name another file")
    if os.path.isdir(report):  # found before the run, not when the report is written at its end
        raise OptionsError(
            f"--dedup-report {report}: is a directory; the report is a file",
            hint=f"name a file, e.g. {os.path.join(report, 'dedup-report.jsonl')}",
        )


def pending_report(path: str) -> str:
    """Where the report waits for the run's commit: a hidden name beside it."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.partial")


def settle_report(report: str | None, ok: bool) -> None:
    """Once the run committed its output (``ok``), the report waiting at :func:`pending_report`
    takes its name; a run that failed leaves none (a report of a run that wrote nothing would look
    complete)."""
    if not report:
        return
    pending = pending_report(report)
    try:
        if ok:
            os.replace(pending, report)
        else:
            os.unlink(pending)
    except FileNotFoundError:
        pass
    except OSError as e:
        if ok:
            raise OutputError(
                f"cannot write the dedup report ({e.strerror})", where=report, hint="check the path"
            ) from None


def write_report(path: str, spill_dir: str, parts: int, scans: list[dict], names: list[dict]) -> int:
    """Write ``--dedup-report``: one JSON line per dropped row, in input order (``row``: its
    0-based row in the input, every row read counted; ``kept_row``: the row it duplicated; and
    where the part reads one file, ``file`` and ``file_row``, the row within that file). ``names``:
    per part (in order), ``{"file": name or None}``. Written to a temporary name, then renamed to
    :func:`pending_report`'s, which :func:`settle_report` renames once the output is committed;
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
        os.replace(tmp, pending_report(path))
    except OSError as e:
        raise OutputError(f"cannot write the dedup report ({e.strerror})", where=path, hint="check the path") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return count
