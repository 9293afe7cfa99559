"""``--dedup`` in the jobs of units (``shard``, ``bucket``): the scan and decide phases of
:mod:`lovecraft_convert.transforms.dedup` as units on the executor, journalled like the shuffle's
spill (``--resume`` keeps every scanned part and decided partition whose files are intact), before
the split phase, whose units then drop the decided rows (:class:`~..transforms.dedup.DropSet`).

Scan units read the input once more than a run without ``--dedup``: the rows dropped must be
known before any row is spilled or written, so that the shards' sizes and the shuffle's buckets are
those of the rows kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..engine.dedup import decide_partition, plan_groups, write_report
from ..engine.journal import SPILL, intact, save_plan
from ..engine.near import components, decide_near_group, group_cap, scan_for
from ..engine.units import unit, usable
from ..errors import OptionsError
from ..transforms.dedup import Dedup
from .convert import output_plan

SCAN, DECIDE, COMPONENTS = "scan", "decide", "components"  # the journal's phases of these units


@unit
def scan_unit(ctx, part, specs: list | None = None) -> dict[str, Any]:
    """Digest the rows of one part the filter keeps and spill them by partition."""
    if hasattr(ctx, "source"):  # bucket: the reader of its sequences, its keep step
        src = ctx.source()
        reader, filt = src.reader, src.keep.filter
    else:
        reader = ctx.reader(specs=specs)
        filt = output_plan(reader, ctx.o).filter
    dedup = Dedup.from_dict(ctx.dedup)
    keep = filt.mask if filt is not None else None
    spill = os.path.join(ctx.work, SPILL)
    res = scan_for(dedup, reader.part_batches(part), keep, reader.schema, part.index, spill, ctx.budget())
    return {"phase": SCAN, **res}


@unit
def decide_unit(ctx, group: int, lo: int, hi: int, scans: list[dict]) -> dict[str, Any]:
    """Decide one group of fine partitions: which of its rows repeat an earlier one (exact), or which
    of its candidate pairs are near duplicates (near)."""
    spill = os.path.join(ctx.work, SPILL)
    near = Dedup.from_dict(ctx.dedup).near
    if near is not None:
        return {"phase": DECIDE, **decide_near_group(spill, group, lo, hi, scans, near)}
    return {"phase": DECIDE, **decide_partition(spill, group, lo, hi, scans)}


@unit
def components_unit(ctx, scans: list[dict], groups: int) -> dict[str, Any]:
    """``--dedup near``: join the decided edges into components, the rows dropped written."""
    return {"phase": COMPONENTS, "partition": 0, **components(os.path.join(ctx.work, SPILL), scans, groups)}


def run_dedup(ctx, parts: list, run, o, reader, dedup: Dedup, args_of: Callable) -> dict[str, Any]:
    """Scan every part and decide every partition (units, journalled); set ``ctx.dedup`` (what the
    split units need, and the manifest's description of the dedup, which this returns) and write
    ``--dedup-report``. ``reader``: the input's reader (its size, its files); ``args_of(part)``:
    the scan unit's arguments after the context."""
    if run.place is not None and run.place.get("isolated"):
        raise OptionsError(
            "--dedup with --engine ray writing to a store: the dedup spill stays on the driver's disk, which the units "
            "cannot see",
            hint="run it with --engine local, or write to a local directory",
        )
    ctx.dedup = {**dedup.describe(), "partitions": None}
    near = dedup.near is not None
    scanned = {e["part"]: e for e in usable(run, run.journal.phase(SCAN))}
    calls = [(ctx, *args_of(p)) for p in parts if p.index not in scanned]
    run.run_units(scan_unit, calls, "deduplicating", o.progress, scanned, "part", noun="part")
    scans = [scanned[p.index] for p in parts]
    if "dedup_groups" not in run.plan:  # from the counts the scans wrote: the same whatever the workers
        run.plan["dedup_groups"] = plan_groups(os.path.join(run.work, SPILL), scans, group_cap(dedup, ctx.budget()))
        save_plan(run.work, run.plan)
    groups = run.plan["dedup_groups"]
    n = ctx.dedup["partitions"] = len(groups)
    decided = {e["partition"]: e for e in run.journal.phase(DECIDE) if intact(run.work, e)}
    if calls:  # a part scanned again: the groups are decided again
        decided = {}
    calls = [(ctx, k, lo, hi, scans) for k, (lo, hi) in enumerate(groups) if k not in decided]
    redo = bool(calls)
    run.run_units(decide_unit, calls, "deciding", o.progress, decided, "partition", noun="partition")
    if near:  # the edges of every group joined into components: one drop set
        joined = {e["partition"]: e for e in run.journal.phase(COMPONENTS) if intact(run.work, e)}
        if redo:
            joined = {}
        calls = [] if joined else [(ctx, scans, n)]
        run.run_units(components_unit, calls, "joining", o.progress, joined, "partition", noun="step")
        ctx.dedup["groups"] = n
        n = ctx.dedup["partitions"] = 1
    if o.dedup_report:
        names = []
        for p in parts:
            one = p.stop_spec is None or p.stop_spec == p.spec + 1
            name = reader.specs[p.spec].name
            if os.path.dirname(os.path.abspath(name)) == os.path.abspath(run.work):
                name = "<stdin>"  # the copy of stdin the run spooled
            names.append({"file": name if one else None})
        write_report(o.dedup_report, os.path.join(run.work, SPILL), n, scans, names)
    return dict(ctx.dedup)


def summed(frags: list[dict]) -> tuple[dict[str, int], int]:
    """The rows removed per reason and the rows read, over the split units' fragments."""
    removed: dict[str, int] = {}
    for f in frags:
        for k, v in (f.get("removed") or {}).items():
            removed[k] = removed.get(k, 0) + int(v)
    return removed, sum(int(f.get("read", f.get("rows", 0))) for f in frags)
