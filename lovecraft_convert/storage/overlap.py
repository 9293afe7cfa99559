"""An output must not replace, contain or lie inside one of its own inputs.

An output directory is replaced as a whole (``--overwrite`` moves the old one aside and deletes
it; an object-store commit deletes every object under its prefix that the new manifest does not
name), so an input inside it is lost; an output inside an input directory (a dataset, a Hugging
Face directory) adds a directory that input does not list, which then fails ``verify``. Paths are
compared as the file system sees them, not as they are spelled: ``alias/D`` where ``alias`` is a
symbolic link is compared by its real path, and a directory seen at two places (a bind mount) by
its device and inode.
"""

from __future__ import annotations

import os

from ..errors import OutputError
from .uri import is_remote

REPLACE = "choose another output directory"
INSIDE = "choose an output directory outside it"


def check_local(output: str, inputs: list[str]) -> None:
    """Refuse (one line naming both) an output directory ``output`` that is, holds or lies inside one
    of the local ``inputs`` (files or directories; object-store URIs are skipped)."""
    out = os.path.abspath(output)
    real_out = os.path.realpath(out)
    out_chain = _identities(real_out)  # the output (when it exists) and every existing directory above it
    out_id = _identity(real_out)
    # directory -> the identities of it and of every directory above it (many inputs share them)
    above: dict[str, set[tuple[int, int]]] = {}
    for p in inputs:
        if p == "-" or is_remote(p):
            continue
        src = os.path.abspath(p)
        real_src = os.path.realpath(src)
        src_id = _identity(real_src)
        parent = os.path.dirname(real_src)
        if parent not in above:
            above[parent] = _identities(parent)
        chain = above[parent] | ({src_id} if src_id is not None else set())
        inside_out = _within(real_src, real_out) or (out_id is not None and out_id in chain)
        if inside_out:
            raise OutputError(f"{out}: the output would replace the input {src}{_seen_as(out, real_out)}", hint=REPLACE)
        if os.path.isdir(real_src) and (_within(real_out, real_src) or (src_id is not None and src_id in out_chain)):
            raise OutputError(
                f"{out}: the output would be inside the input {src}{_seen_as(out, real_out)}", hint=INSIDE
            )


def check_remote(output: str, inputs: list[str]) -> None:
    """The same for an object-store output ``output`` and the object-store URIs among ``inputs``
    (objects or dataset prefixes): equal, one under the other's prefix, either way."""
    out = _uri(output)
    for p in inputs:
        if not is_remote(p):
            continue
        src = _uri(p)
        if src == out or src.startswith(out + "/"):
            raise OutputError(f"{output.rstrip('/')}: the output would replace the input {p.rstrip('/')}", hint=REPLACE)
        if out.startswith(src + "/"):
            raise OutputError(
                f"{output.rstrip('/')}: the output would be inside the input {p.rstrip('/')}", hint=INSIDE
            )


def same_file(a: str, b: str) -> bool:
    """Are local paths ``a`` and ``b`` one file (by real path, or by device and inode: a hard link,
    a bind mount)?"""
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    if ra == rb:
        return True
    ia = _identity(ra)
    return ia is not None and ia == _identity(rb)


def inside(path: str, directory: str) -> bool:
    """Is local ``path`` ``directory`` itself or under it (by real paths)?"""
    return _within(os.path.realpath(path), os.path.realpath(directory))


def _uri(u: str) -> str:
    scheme, _, rest = u.partition("://")
    parts = [x for x in rest.split("/") if x]  # s3://b//k and s3://b/k/ name the prefix of s3://b/k
    return f"{scheme.lower()}://" + "/".join(parts)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _identities(path: str) -> set[tuple[int, int]]:
    """(device, inode) of ``path`` and of every directory above it that exists."""
    out = set()
    p = path
    while True:
        ident = _identity(p)
        if ident is not None:
            out.add(ident)
        up = os.path.dirname(p)
        if up == p:
            return out
        p = up


def _seen_as(path: str, real: str) -> str:
    return f" ({path} is {real})" if real != path else ""
