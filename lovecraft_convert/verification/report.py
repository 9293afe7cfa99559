"""What ``verify`` found: one :class:`Problem` per thing wrong, gathered in a :class:`Report`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..util import counted, format_size


@dataclass
class Problem:
    """One thing wrong: ``file`` (relative to the dataset, or a source input as given), a ``kind``
    (manifest, missing, stray, size, hash, decode, rows, schema, stats, bucket, float16, source)
    and what is wrong. ``path`` is the file as printed (joined to the dataset path)."""

    file: str
    kind: str
    message: str
    path: str = ""

    def line(self) -> str:
        return f"{self.path or self.file}: {self.message}"

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "path": self.path or self.file, "kind": self.kind, "message": self.message}


@dataclass
class Report:
    path: str
    problems: list[Problem] = field(default_factory=list)
    format: str | None = None
    rows: int | None = None
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    against: dict[str, Any] | None = None
    warnings: list[Problem] = field(default_factory=list)  # worth saying, not wrong (a stray README)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        return [p.line() for p in self.problems]

    def warning_lines(self) -> list[str]:
        return [p.line() for p in self.warnings]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"dataset": self.path, "ok": self.ok}
        d.update((k, getattr(self, k)) for k in ("format", "rows", "files", "bytes"))
        d["seconds"] = round(self.seconds, 3)
        d["problems"] = [p.to_dict() for p in self.problems]
        d["warnings"] = [p.to_dict() for p in self.warnings]
        d["against"] = self.against
        return d

    def summary(self) -> str:
        what = "hashes, decoding, statistics" + (", source" if self.against else "")
        if self.ok:
            return (
                f"ok: {self.path}: {self.format}, {counted(self.rows, 'row')}, {counted(self.files, 'file')}, "
                f"{format_size(self.bytes)} verified ({what}) in {self.seconds:.1f}s"
            )
        n = len(self.problems)
        return f"{self.path}: {n} problem{'s' if n != 1 else ''} found"
