"""The state of a resumable run in its work directory: the plan (what must not change between a
run and its ``--resume``, and what was decided once, such as shuffle buckets or rows per shard) and
the journal of committed units."""

from __future__ import annotations

import json
import os

from ..errors import OptionsError, OutputError

JOURNAL = "journal.jsonl"
PLAN = "plan.json"
SPILL = "spill"
# may change between a run and its --resume (a run started locally can be finished on Ray)
VOLATILE_OPTIONS = ("workers", "resume", "overwrite", "progress", "engine", "ray_address", "dedup_report")


class Journal:
    """``journal.jsonl`` of a resumable run: one fsynced line per committed unit; a torn last line
    (a crash while writing it) is dropped and that unit is redone. A run writing to a store keeps
    each entry there too, beside its data, for a ``--resume`` on another machine."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.path = os.path.join(work, JOURNAL)
        self.entries: list[dict] = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    try:
                        self.entries.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # a torn last line: that unit is redone
        self.f = open(self.path, "a")  # noqa: SIM115

    def add(self, entry: dict) -> None:
        from ..storage.stream import journal_key, mirror

        line = json.dumps(entry) + "\n"
        self.f.write(line)
        self.f.flush()
        os.fsync(self.f.fileno())
        mirror(self.work, journal_key(len(self.entries)), line.encode())
        self.entries.append(entry)

    def phase(self, n: int) -> list[dict]:
        return [e for e in self.entries if e.get("phase") == n]

    def reset(self) -> None:
        from ..storage.stream import JOURNAL_DIR, forget

        self.f.close()
        forget(self.work, JOURNAL_DIR + "/")
        os.unlink(self.path)
        self.entries = []
        self.f = open(self.path, "a")  # noqa: SIM115

    def close(self) -> None:
        self.f.close()


LEADING = ("to", "layout", "dedup", "tokenizer", "input_format")  # options named first when several differ


def difference(old: dict, new: dict) -> tuple[str, str] | None:
    """How the job fingerprint ``new`` differs from ``old`` (both JSON-able): ``("option", text)``
    naming the first option that differs, ``("input", text)`` naming an input that differs (or
    changed on disk since), ``("version", text)``; None when they agree."""
    old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    for d in (old, new):
        if "options" in d:
            d["options"] = _resolved(d["options"] or {})
    if old == new:
        return None
    if old.get("command") != new.get("command"):
        return (
            "option",
            f"it was made by `lovecraft {old.get('command') or 'shard'}`, not `{new.get('command') or 'shard'}`",
        )
    o_opts, n_opts = old.get("options") or {}, new.get("options") or {}
    # the options others depend on first (a run of --dedup exact resumed with near differs in
    # --band-rows too, which named it alone), then by name
    for k in sorted(set(o_opts) | set(n_opts), key=lambda k: (LEADING.index(k) if k in LEADING else len(LEADING), k)):
        if o_opts.get(k) != n_opts.get(k):
            flag = "--" + k.replace("_", "-")
            return "option", f"it was made with {flag} {_shown(o_opts.get(k))}, this run has {_shown(n_opts.get(k))}"
    o_src, n_src = old.get("sources") or [], new.get("sources") or []
    if [s.get("name") for s in o_src] != [s.get("name") for s in n_src]:
        names = ", ".join(str(s.get("name")) for s in o_src) or "none"
        return "input", f"it was made from other inputs ({names})"
    for a, b in zip(o_src, n_src, strict=True):
        if a != b:
            what = [k for k in ("size", "mtime", "manifest_sha256", "compression", "format") if a.get(k) != b.get(k)]
            if what:
                said = f"{', '.join(what)} {'differ' if len(what) > 1 else 'differs'}"
            elif a.get("listing_sha256") != b.get("listing_sha256"):
                said = "a file was added, removed, resized or rewritten"
            else:
                said = "its description differs"
            return "input", f"{b.get('name')} changed since it was made ({said})"
    if old.get("digest") != new.get("digest"):
        return "version", f"its --dedup digests are {_shown(old.get('digest'))}, this version makes {new.get('digest')}"
    return "version", "it was made by another version of the manifest"


def _resolved(opts: dict) -> dict:
    """``opts`` with ``--dedup near``'s parameters that were not given set to what the run uses
    (:meth:`~lovecraft_convert.transforms.near.NearParams.given`), so that giving a default
    explicitly is the same command as leaving it out ("made with --threshold unset, this run has
    0.8" refused it)."""
    if opts.get("dedup") != "near":
        return opts
    from ..transforms.near import NearParams

    used = NearParams.given(opts).to_dict()
    used["dedup_seed"] = used.pop("seed")
    return {**opts, **used}


def _shown(v) -> str:
    if v is None or v is False:
        return "unset" if v is None else "off"
    if v is True:
        return "on"
    if isinstance(v, list):
        return ",".join(map(str, v))
    return str(v)


def load_plan(work: str, fingerprint: dict, out_path: str) -> dict:
    path = os.path.join(work, PLAN)
    if os.path.exists(path):
        with open(path) as f:
            plan = json.load(f)
        diff = difference(plan.get("fingerprint") or {}, fingerprint)
        if diff is not None:
            from ..storage.stream import target

            remote = target(work)  # a run on a store: named there, not by this machine's scratch
            where = f"{remote['uri'].rstrip('/')}/{remote['run']}" if remote else work
            cls = OptionsError if diff[0] == "option" else OutputError
            raise cls(
                f"{out_path}: the unfinished run in {where} cannot be resumed: {diff[1]}",
                hint="run it with the same command and --resume, or pass --overwrite to start over",
            )
        return plan
    plan = {"fingerprint": fingerprint, "widened": {}}
    save_plan(work, plan)
    return plan


def save_plan(work: str, plan: dict) -> None:
    from ..storage.stream import mirror

    path = os.path.join(work, PLAN)
    body = json.dumps(plan)
    with open(path + ".tmp", "w") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)
    mirror(work, PLAN, body.encode())


def intact(work: str, entry: dict) -> bool:
    """Are a journalled unit's spill files all there, at the sizes and with the CRC32C digests
    recorded? (A machine crash can lose unsynced spill files, a disk can damage them; such a unit
    is redone.) Each file is read whole once, when a run is resumed."""
    from .frames import file_crc

    spill = os.path.join(work, SPILL)
    for name, info in entry.get("files", {}).items():
        size = info["size"] if isinstance(info, dict) else info
        p = os.path.join(spill, name)
        if not os.path.exists(p) or os.path.getsize(p) != size:
            return False
        if isinstance(info, dict) and "crc32c" in info and file_crc(p) != info["crc32c"]:
            return False
    return True
