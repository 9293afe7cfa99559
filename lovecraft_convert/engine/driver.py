"""The run driver of resumable jobs (``shard``, ``bucket``): everything around the units.

It locks the output and opens its work directory (``.<output>.partial``), copies stdin there when
workers must read it, loads or creates the plan (refusing a ``--resume`` with other inputs or
options), keeps the journal, starts the executor, turns Ctrl-C and SIGTERM into one line and exit
130 (the work directory kept for ``--resume``), stops workers on any error, writes the format's
dataset-wide files, removes the run's scratch files and commits the manifest last.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import Interrupted, LovecraftError
from ..runtime.interrupts import Signals, raise_pending
from .commit import output_dir
from .executors import make_executor
from .journal import JOURNAL, PLAN, SPILL, Journal, load_plan
from .meter import ByteBar
from .pipeline import unit_bar
from .units import hand_over, log_unit, place_of


@dataclass
class Run:
    """What a job's body gets: its work directory, plan, journal and executor, and the place of a
    run writing to a store (:func:`.units.place_of`, for the units' contexts)."""

    work: str
    output: str
    inputs: list[str]
    plan: dict
    journal: Journal
    executor: Any
    place: dict | None = None

    def run_units(
        self,
        fn,
        calls: list[tuple],
        desc: str,
        progress: bool | None,
        into: dict,
        key: str,
        tag: dict | None = None,
        *,
        noun: str = "unit",
        input_bytes: int | None = None,
    ) -> None:
        """Run the units ``fn(*call)`` on the executor; journal each fragment as it arrives (with
        ``tag`` added) and keep it in ``into`` under its ``key``. On a terminal a bar counts the
        units (as ``noun``s) or, given ``input_bytes`` (the input's size, for a phase that reads
        it), the input bytes read: the units report them through :mod:`.meter` while they run and
        in their fragments' ``bytes`` when done."""
        if input_bytes is not None and calls:
            bytes_bar = ByteBar(
                self.work, input_bytes, sum(int(e.get("bytes", 0)) for e in into.values()), progress, desc
            )
            bar, done = bytes_bar, lambda res: bytes_bar.finished(res[key], res.get("bytes", 0))
        else:
            units = unit_bar(progress, len(calls), desc, noun)
            bar, done = units, lambda res: units.update()
        try:
            for res in self.executor.map(fn, calls):
                t0 = time.perf_counter()
                timing = hand_over(self.work, res)
                if tag:
                    res.update(tag)
                self.journal.add(res)
                log_unit(res, key, timing, time.perf_counter() - t0)
                into[res[key]] = res
                done(res)
        finally:
            bar.close()


def run_job(
    o,
    *,
    output: str,
    inputs: list[str],
    specs: list,
    sources: list[dict],
    body: Callable[[Run], dict],
    command: str = "shard",
    protect_more: tuple[str, ...] = (),
    finish: Callable[[str, dict], dict] | None = None,
    unit_noun: str = "shard",
    argv: list[str] | None = None,
    setup: tuple | None = None,
) -> dict:
    """Run ``body`` in the work directory of ``output`` and commit what it returns (the manifest).

    ``o``: the job's options (``overwrite``, ``resume``, ``workers``, ``fingerprint()``); ``specs``:
    the resolved inputs (never overwritten; stdin is copied into the work directory so every
    worker can read it); ``sources``: what the manifest records of them, part of the fingerprint a
    ``--resume`` must match. ``finish(work, manifest)`` returns manifest keys for files written
    once every unit is done. ``unit_noun`` names the journalled units in the interrupted message.
    ``setup``: what every worker runs first (see :func:`~.executors.make_executor`).
    """
    from .dedup import check_report, settle_report

    protect = [s.path for s in specs if not s.is_stdin] + list(protect_more)
    report = getattr(o, "dedup_report", None)
    check_report(report, output, protect)
    try:
        manifest = _run_job(o, output, inputs, specs, sources, body, command, protect, finish, unit_noun, argv, setup)
    except BaseException:
        settle_report(report, ok=False)
        raise
    settle_report(report, ok=True)
    return manifest


def _run_job(o, output, inputs, specs, sources, body, command, protect, finish, unit_noun, argv, setup) -> dict:
    from .. import manifest as mf
    from ..storage import is_remote, local_path

    workers = o.workers or os.cpu_count() or 1
    fingerprint = {"options": o.fingerprint(), "sources": sources, "version": mf.VERSION}
    if command != "shard":
        fingerprint["command"] = command
    if getattr(o, "dedup", None) == "exact":  # its spilled digests are of this hash: another's cannot be mixed in
        from ..transforms.dedup import DIGEST

        fingerprint["digest"] = DIGEST
    stdin_spec = next((s for s in specs if s.is_stdin), None)
    overwrite, resume = o.overwrite, o.resume
    if resume and not overwrite:
        done = finished_run(output, fingerprint)
        report = getattr(o, "dedup_report", None)
        if done is not None and report and not os.path.exists(report):
            from ..errors import OptionsError

            raise OptionsError(  # (it said "nothing to do", and no report came)
                f"--dedup-report {report}: {output} is already complete, so nothing is read that could be reported",
                hint="pass --overwrite to run it again with the report",
            )
        if done is not None:
            return done

    started = time.time()
    with Signals(), output_dir(output, overwrite=overwrite, protect=protect, resume=resume, budget=o.budget()) as out:
        work = out.tmp
        os.makedirs(os.path.join(work, SPILL), exist_ok=True)
        if stdin_spec is not None:
            inputs = spool_stdin(inputs, work, stdin_spec)
        engine = getattr(o, "engine", "local")
        # a run writing to a store on Ray: its units share nothing with this process but the store
        place = place_of(work, engine == "ray")
        if place is not None and place["isolated"]:
            if stdin_spec is not None:
                inputs = put_spooled(inputs, work, place)
            place["files"] = put_local_files(getattr(o, "local_files", dict)(), place)
        try:
            plan = load_plan(work, fingerprint, out.path)
        except LovecraftError:  # a run this one may not resume: kept for the one that may
            out.keep = True
            raise
        journal = Journal(work)
        executor = make_executor(
            workers,
            setup,
            engine=engine,
            address=getattr(o, "ray_address", None),
            memory=o.budget() // 4,
            work="" if place is not None and place["isolated"] else work,
            visible=sorted({os.path.dirname(os.path.abspath(local_path(p))) for p in inputs if not is_remote(p)}),
        )
        run = Run(work, out.path, list(inputs), plan, journal, executor, place)
        try:
            manifest = body(run)
            executor.close()
            journal.close()
            raise_pending()  # an interrupt held while the workers stopped
            manifest.update({"argv": argv, "seconds": round(time.time() - started, 3), "workers": workers})
            if finish is not None:
                manifest.update(finish(work, manifest))
            # the scratch goes with the commit, which no interrupt cuts: until the output is in
            # place the journal is there for --resume
            out.commit(manifest, drop=(SPILL, JOURNAL, PLAN))
        except KeyboardInterrupt:
            out.keep = True
            executor.close(kill=True)
            journal.close()
            done = len(journal.phase(2))
            units = f"{done} {unit_noun}{'' if done == 1 else 's'}"
            # a store's output: its units are committed there, the journal that --resume reads here
            where = f"for {out.path} (its journal in {work})" if is_remote(out.path) else f"in {work}"
            raise Interrupted(
                f"interrupted; {units} committed {where}",
                hint="run the same command with --resume to finish, or --overwrite to start over",
            ) from None
        except BaseException:
            executor.close(kill=True)
            journal.close()
            raise
    return manifest


def finished_run(output: str, fingerprint: dict) -> dict | None:
    """``--resume`` on an output that is already a complete dataset: its manifest (with
    ``nothing_to_do: True`` added, not written) when it was made by the same command, options and
    inputs and its files are all there at their sizes; an error saying what differs otherwise.
    None when there is no complete dataset at ``output`` (the run goes ahead)."""
    from .. import manifest as mf
    from ..errors import OptionsError, OutputError
    from ..storage import child_path, is_remote
    from .journal import VOLATILE_OPTIONS, difference

    remote = is_remote(output)
    if remote:
        from ..storage import dataset as stored

        path = output.rstrip("/")
        m, problem = stored.load(path)
        if problem is not None and problem[0] == "missing":
            return None
        from ..storage.scratch import sweep

        sweep()  # a run killed after its commit left its local scratch: this run ends here
        sizes = stored.sizes(path)
    else:
        path = os.path.abspath(output.rstrip("/") or output)
        if not mf.is_dataset(path):
            return None
        m, problem = mf.load(path)
    if problem is not None or mf.problems(m) or mf.shape_problems(m, limit=1):
        raise OutputError(
            f"{path}: already exists and is not a complete dataset", hint="pass --overwrite to replace it"
        )
    made = {
        "options": {k: v for k, v in (m.get("options") or {}).items() if k not in VOLATILE_OPTIONS},
        "sources": m.get("sources"),
        "version": m.get("version"),
    }
    if m.get("command") not in (None, "shard"):
        made["command"] = m.get("command")
    # the digest of --dedup exact matters to an unfinished run (its spill cannot mix two), not to
    # a finished one, whose rows are the same whichever 128-bit digest compared them: it was
    # missing from this side, and a finished --dedup exact dataset was never "already complete"
    fingerprint = {k: v for k, v in fingerprint.items() if k != "digest"}
    diff = difference(made, fingerprint)
    if diff is not None:
        cls = OptionsError if diff[0] == "option" else OutputError
        raise cls(
            f"{path}: a finished dataset is there, but {diff[1]}",
            hint="run the same command as before, or pass --overwrite to replace it",
        )
    mf.check_paths(path, m)
    for f in m.get("files") or []:
        full = child_path(path, str(f.get("path")))
        local_size = None if remote or not os.path.isfile(full) else os.path.getsize(full)
        size = sizes.get(str(f.get("path"))) if remote else local_size
        if size != f.get("bytes"):
            raise OutputError(
                f"{full}: the finished dataset's file is missing or of another size",
                hint="run `lovecraft verify` on it, or pass --overwrite to write it again",
            )
    if remote:
        from ..storage.output import clear_committed_state

        clear_committed_state(path, m)
    return {**m, "nothing_to_do": True}


def put_spooled(inputs: list[str], work: str, place: dict) -> list[str]:
    """``inputs`` with the stdin copy of the work directory put on the store beside the run's spill
    (units that share nothing with this process read it there; the commit deletes it)."""
    from ..storage.stores import get_store
    from ..storage.stream import SPILL_OBJECTS
    from ..storage.uri import split

    out = []
    for p in inputs:
        if os.path.dirname(os.path.abspath(p)) != os.path.abspath(work):
            out.append(p)
            continue
        key = f"{place['prefix']}{SPILL_OBJECTS}/{os.path.basename(p)}"
        get_store(place["uri"]).upload(p, key, part=place["part"], hash="sha256")
        scheme, bucket, _ = split(place["uri"])
        out.append(f"{scheme}://{bucket}/{key}")
    return out


def put_local_files(files: dict[str, str], place: dict) -> dict[str, dict]:
    """Put the local files options name (``files``: option -> path, a tokenizer file) on the store
    beside the run's spill, for units that share nothing with this process: option -> where
    (``key``), its file ``name`` and ``sha256`` (the unit checks what it gets)."""
    from ..storage.stores import get_store
    from ..storage.stream import SPILL_OBJECTS

    out = {}
    for opt, path in files.items():
        name = os.path.basename(path)
        key = f"{place['prefix']}{SPILL_OBJECTS}/{opt}-{name}"
        nbytes, digest = get_store(place["uri"]).upload(path, key, part=place["part"], hash="sha256")
        out[opt] = {"key": key, "name": name, "bytes": nbytes, "sha256": digest}
    return out


def spool_stdin(inputs: list[str], work: str, spec) -> list[str]:
    """A copy of stdin in the work directory (workers cannot share a pipe); ``inputs`` naming it."""
    from ..inputs.sources import COMPRESSIONS
    from ..inputs.streams import stdin_buffer

    ext = {name: e for e, name in COMPRESSIONS.items() if e != ".zstd"}.get(spec.compression or "", "")
    path = os.path.join(work, "stdin" + ext)
    if spec.stdin_spool:
        shutil.copyfile(spec.stdin_spool, path)
    else:
        with open(path, "wb") as f:
            shutil.copyfileobj(stdin_buffer(), f, 4 << 20)
    return [path if x == "-" else x for x in inputs]
