"""Describing a format (``inspect``): the code that loads a dataset with the usual client
libraries, files of the format described on their own, and helpers for generated code
(:func:`py_str`, :class:`Idents`)."""

from __future__ import annotations

from typing import Any

from .part import FormatPart


class DescribingPart(FormatPart):
    """The descriptor's describing part (the :class:`~.protocols.Describes` protocol), with defaults."""

    reads_remote: bool = False  # its readers stream from an object store URI (inspect shows their code for one)

    def load_snippets(self, path: str, manifest: dict) -> dict[str, str]:
        """The lines of code that load the dataset with the usual client libraries, by library."""
        return {}

    def claims_file(self, path: str) -> bool:
        """Is ``path`` a file of this format that ``inspect`` can describe on its own?"""
        return False

    def inspect_files(self, paths: list[str], *, sample: int | None, max_expansion: float) -> dict[str, Any]:
        raise NotImplementedError

    def format_file_report(self, report: dict[str, Any]) -> str:
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# helpers for load snippets
# --------------------------------------------------------------------------------------------


def py_str(s: str) -> str:
    """A Python string literal of ``s`` (for generated code)."""
    import json

    return json.dumps(s)


def py_ident(name: str) -> str:
    """A Python identifier made from a column name (for generated code): characters an identifier
    cannot hold become ``_``; a keyword gets a trailing ``_``."""
    import keyword

    s = "".join(c if ("_" + c).isidentifier() else "_" for c in name)
    if not s.isidentifier():
        s = "_" + s
    return s + "_" if keyword.iskeyword(s) or keyword.issoftkeyword(s) else s


class Idents:
    """Distinct identifiers for the variables of generated code: two columns never share one
    (``a.b`` and ``a_b``, or ``ﬁle`` and ``file``, which Python reads as one name), and none
    shadows a name the code itself uses (``reserved``: ``np``, a file handle)."""

    def __init__(self, reserved: tuple[str, ...] = ()) -> None:
        self.used = {self._key(r) for r in reserved}

    @staticmethod
    def _key(ident: str) -> str:
        import unicodedata

        return unicodedata.normalize("NFKC", ident)  # how Python compares identifiers

    def take(self, name: str, suffixes: tuple[str, ...] = ("",)) -> str:
        """A base identifier made from ``name`` such that base + each suffix is still free; all
        of those are taken."""
        base = py_ident(name)
        cand, k = base, 2
        while any(self._key(cand + sfx) in self.used for sfx in suffixes):
            cand, k = f"{base}_{k}", k + 1
        self.used.update(self._key(cand + sfx) for sfx in suffixes)
        return cand
