"""Help text that cannot go stale: the input kinds and output formats are listed from their registries
(``inputs/kinds.py``, ``formats/__init__.py``), which import nothing heavy, so ``--help`` stays instant."""

from __future__ import annotations


def _table(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(name) for name, _ in rows)
    return [f"  {name.ljust(width)}  {text}" for name, text in rows]


def inputs_block() -> str:
    """The input kinds (``--input-format``), how each is recognised, and the compressions read."""
    from ..inputs import kinds

    rows = []
    for kind in kinds.names():
        seen = kinds.recognised_by(kind)
        rows.append((kind, kinds.HELP.get(kind, "") + (f" [{' '.join(seen)}]" if seen else "")))
    return "\n".join(
        [
            "\b",
            "Inputs (paths, globs, s3:// URIs or - for stdin; the kind is detected, or --input-format):",
            *_table(rows),
            "  plain or compressed: .gz .bz2 .xz .zst (decompressed as streams)",
        ]
    )


def outputs_block() -> str:
    """The output formats (``--to``): built-in ones, from the registry, without importing them."""
    from ..formats import HELP, builtin_names

    rows = [(name, HELP.get(name, "")) for name in builtin_names()]
    return "\n".join(
        [
            "\b",
            "Outputs (--to), each a directory of plain files and a _manifest.json of what was written:",
            *_table(rows),
            "  (and the formats installed packages register)",
        ]
    )


def examples(*lines: str) -> str:
    """A command's epilog: its examples, kept as written (``\\b``: Click does not rewrap them)."""
    return "\n".join(["\b", "Examples:", *(f"  {line}" for line in lines)])
