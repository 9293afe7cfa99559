"""The state of a resumable run in its work directory: the plan (what must not change between a
run and its ``--resume``, and what was decided once, such as shuffle buckets or rows per shard) and
the journal of committed units."""

from __future__ import annotations

import json
import os

from ..errors import OutputError

JOURNAL = "journal.jsonl"
PLAN = "plan.json"
SPILL = "spill"


class Journal:
    """``journal.jsonl`` of a resumable run: one fsynced line per committed unit; a torn last line
    (a crash while writing it) is dropped and that unit is redone."""

    def __init__(self, work: str) -> None:
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
        self.f.write(json.dumps(entry) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())
        self.entries.append(entry)

    def phase(self, n: int) -> list[dict]:
        return [e for e in self.entries if e.get("phase") == n]

    def reset(self) -> None:
        self.f.close()
        os.unlink(self.path)
        self.entries = []
        self.f = open(self.path, "a")  # noqa: SIM115

    def close(self) -> None:
        self.f.close()


def load_plan(work: str, fingerprint: dict, out_path: str) -> dict:
    path = os.path.join(work, PLAN)
    if os.path.exists(path):
        with open(path) as f:
            plan = json.load(f)
        if plan.get("fingerprint") != json.loads(json.dumps(fingerprint)):
            raise OutputError(
                f"{out_path}: the unfinished run in {work} was made with other inputs or options",
                hint="run it with the same command and --resume, or pass --overwrite to start over",
            )
        return plan
    plan = {"fingerprint": fingerprint, "widened": {}}
    save_plan(work, plan)
    return plan


def save_plan(work: str, plan: dict) -> None:
    path = os.path.join(work, PLAN)
    with open(path + ".tmp", "w") as f:
        json.dump(plan, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)


def intact(work: str, entry: dict) -> bool:
    """Are a journalled unit's spill files all there, at the sizes recorded? (A machine crash can
    lose unsynced spill files; such a unit is redone.)"""
    spill = os.path.join(work, SPILL)
    for name, info in entry.get("files", {}).items():
        size = info["size"] if isinstance(info, dict) else info
        p = os.path.join(spill, name)
        if not os.path.exists(p) or os.path.getsize(p) != size:
            return False
    return True
