"""The file names of a memmap dataset's columns: distinct for every header, by construction.

A column's files are ``<base>.npy`` (a fixed-shape column), or ``<base>.values.npy`` and
``<base>.offsets.npy`` (a variable-length one), each prefixed by the unit's stem in a sharded
dataset. ``<base>`` is the column's name itself when that is safe ("plain"), which keeps the names
of ordinary columns (``label``, ``pixel_0``, ``Price (EUR)``) as they always were; otherwise it
is ``~`` and the name escaped. Readers never derive a file name from a column: the manifest lists
each file with its ``column`` and ``role``, and records the scheme under ``memmap.file_names``.

Why the names cannot collide, whatever the header:

* a plain name is 1 to 200 bytes of UTF-8, holds no ``/``, ``\\``, NUL, ``~``, control or
  format character, does not start with ``.``, and does not end with ``.values`` or ``.offsets``
  (compared case-folded): so the suffix of a file name tells its role, and the rest its base;
* an escaped name is ``~`` then the name's UTF-8 bytes, ``a``-``z``, ``0``-``9``, ``_`` and ``-``
  kept, every other byte written ``%XX`` (upper-case hex): it is unique per name, holds exactly one
  ``~`` (no plain name holds one), no upper-case letter outside ``%XX``, and no ``.``;
* a name whose escape would exceed 200 bytes becomes ``~``, its escape's first 150 bytes, ``~`` and
  32 hex digits of its BLAKE2b digest (two ``~``: no other kind of base has two);
* file systems that ignore case or Unicode normalization (macOS, Windows) would take ``A.npy`` and
  ``a.npy``, or an ``é`` composed and decomposed, for one file: plain names equal once
  normalized (NFD) and case-folded are all escaped instead, and escaped names differ in that
  sense too (their letters are lower-case, their hex digits upper-case).

Every base is also checked against every other, folded, before a file is made: only a BLAKE2b
collision between two names over 200 bytes could fail that, and it is refused, not written.
"""

from __future__ import annotations

import hashlib
import unicodedata

from ...errors import SchemaError

SCHEME = "plain-or-escaped-1"  # recorded in the manifest (``memmap.file_names``)
ROLE_SUFFIXES = (".values", ".offsets")
MAX_BYTES = 200  # of a base: with a unit's stem and ".offsets.npy", well under 255 bytes
KEEP = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def fold(name: str) -> str:
    """What a case- and normalization-insensitive file system compares."""
    return unicodedata.normalize("NFD", name).casefold()


def is_plain(name: str) -> bool:
    """Can the column's name be its files' base as it is?"""
    if not name or name.startswith(".") or len(name.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return False
    for c in name:
        if c in "/\\~\x00" or unicodedata.category(c)[0] == "C" or (unicodedata.category(c)[0] == "Z" and c != " "):
            return False
    folded = fold(name)
    return "~" not in folded and not folded.endswith(ROLE_SUFFIXES)


def escaped(name: str) -> str:
    """``~`` and the name's bytes, ``[a-z0-9_-]`` as they are and every other byte ``%XX``."""
    raw = name.encode("utf-8", "surrogatepass")
    body = "".join(chr(b) if chr(b) in KEEP else f"%{b:02X}" for b in raw)
    if 1 + len(body) <= MAX_BYTES:
        return "~" + body
    return "~" + body[:150] + "~" + hashlib.blake2b(raw, digest_size=16).hexdigest()


def column_bases(names: list[str], source: str = "input") -> dict[str, str]:
    """column -> the base of its files' names (see the module's docstring)."""
    bases = {n: n if is_plain(n) else escaped(n) for n in names}
    groups: dict[str, list[str]] = {}
    for n, b in bases.items():
        if b == n:
            groups.setdefault(fold(b), []).append(n)
    for same in groups.values():
        if len(same) > 1:  # names only a case- or normalization-insensitive file system confuses
            for n in same:
                bases[n] = escaped(n)
    seen: dict[str, str] = {}
    for n, b in bases.items():
        other = seen.setdefault(fold(b), n)
        if other != n:
            raise SchemaError(
                f"{source}: columns {other!r} and {n!r} would share the memmap file name {b!r}",
                hint="rename one of them, or write parquet/tfrecord/hdf5",
            )
    return bases
