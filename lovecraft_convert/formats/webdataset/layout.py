"""How lovecraft's columns are WebDataset members.

A row is a sample: members ``<key>.<extension>`` written one after another in the order of their
extensions, ``<key>`` the row's number in the dataset, nine digits or more (``000001234``; shard
``k`` of ``shard`` starts where shard ``k - 1`` ends). What each column becomes:

=====================================  ==================  ========================================
lovecraft column                       member              ``wds.WebDataset(...).decode()`` gives
=====================================  ==================  ========================================
binary (and fixed bytes)               ``<key>.<column>``  the bytes, as they came (an image column
                                       (none where empty)  named ``jpg`` is ``.jpg``, which
                                                           ``.decode("pil")`` opens)
a file's ``bytes`` beside its ``path``  ``<key>.<its ext>`` the file's bytes, named by its own
(the files input's columns)                                extension (``cat/001.JPG``: ``.jpg``), so
                                                           ``.decode("pil")`` opens images; the
                                                           sample's first member
integer column named ``cls`` (or,      ``<key>.cls``       an ``int`` (decimal text)
without one, ``label``)
fixed numbers of shape ``(d1, ..)``,   ``<key>.<column>    an array of that dtype and shape
sequences of numbers                   .npy``              (NumPy's ``.npy``)
every other column: numbers, bools,    one ``<key>.json``  a dict of them: numbers as JSON numbers
text, lists of strings                                     (floats exact: the decimal of their
                                                           double value; NaN and infinities as
                                                           Python writes them), text as strings
=====================================  ==================  ========================================

WebDataset splits a member's name at the first dot after the last slash and lowercases the
extension, so a member column's name must hold no ``/``, and no two members may have extensions
equal once lowercased; such a schema is refused in one line. A file whose extension is not plain
(letters and digits, at most 16) or is another member's (a folder's ``.json`` documents beside the
``.json`` member) is named ``<key>.bytes`` instead. The manifest's ``webdataset.file_member`` names
the column written this way, so readers know the member's extension varies.
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
from dataclasses import dataclass, field

import numpy as np

from ...errors import SchemaError
from ...schema import BINARY, FIXED, SEQUENCE, STRING, STRING_LIST, Field, Schema, VarColumn

KEY_DIGITS = 9
RAW, CLS, NPY, JSON = "raw", "cls", "npy", "json"


@dataclass
class Member:
    ext: str  # a per_file member's: the one used where the file's own cannot be
    kind: str  # RAW | CLS | NPY | JSON
    field: Field | None  # None for the json member (it holds Plan.json)
    per_file: bool = False  # named by each row's file extension (see file_member_of)


@dataclass
class Plan:
    """The members of every sample, in the order they are written (sorted by extension)."""

    members: list[Member]
    json: list[Field] = field(default_factory=list)

    def extensions(self) -> list[str]:
        return [m.ext for m in self.members]


def optional(m: Member) -> bool:
    """Is ``m`` left out of a sample whose value is empty? A binary column's member is: a
    WebDataset of mixed extensions (``.jpg`` in some samples, ``.png`` in others) read as input has
    empty bytes where a sample had no such member, and writing them as empty members would hand
    its readers a ``.png`` of 0 bytes to decode. The file member is kept (an empty file is a file),
    as are the other kinds (their empty forms are not empty bytes)."""
    return m.kind == RAW and not m.per_file


def _cls_field(schema: Schema) -> Field | None:
    for name in ("cls", "label"):
        for f in schema:
            if f.name == name and f.kind == FIXED and not f.shape and f.np_dtype.kind in "iu" and f.logical is None:
                return f
    return None


FILE_COLUMN, PATH_COLUMN = "bytes", "path"  # the files input's columns
EXT_RE = re.compile(r"^[a-z0-9]{1,16}$")


def file_member_of(schema: Schema) -> str | None:
    """The column written as ``<key>.<the file's extension>``: a binary ``bytes`` column beside a
    text ``path`` column (a folder of files, as the files input reads it), else None."""
    names = {f.name: f for f in schema}
    b, p = names.get(FILE_COLUMN), names.get(PATH_COLUMN)
    if b is not None and p is not None and b.kind == BINARY and p.kind == STRING:
        return FILE_COLUMN
    return None


def file_member(manifest: dict) -> str | None:
    """The column the dataset's samples name by each file's extension (None: none)."""
    info = manifest.get("webdataset")
    member = info.get("file_member") if isinstance(info, dict) else None
    return member if isinstance(member, str) else None


def file_exts(plan: Plan, paths: VarColumn, n: int) -> list[str]:
    """Each row's extension for the per-file member: the lowercased last suffix of its path's
    base name when plain and no other member's, else the member's own."""
    taken = {m.ext.lower() for m in plan.members if not m.per_file}
    fallback = next(m.ext for m in plan.members if m.per_file)
    values = np.asarray(paths.values, dtype=np.uint8).tobytes()
    offs = np.asarray(paths.offsets, dtype=np.int64).tolist()
    out = []
    for i in range(n):
        base = values[offs[i] : offs[i + 1]].rsplit(b"/", 1)[-1]
        dot = base.rfind(b".")
        ext = base[dot + 1 :].decode("utf-8", "replace").lower() if dot > 0 else ""
        out.append(ext if EXT_RE.match(ext) and ext not in taken else fallback)
    return out


def plan(schema: Schema, source: str = "", file_member: str | None = None) -> Plan:
    """The members of ``schema``'s samples; SchemaError (one line naming the column) for a column
    whose member WebDataset could not tell apart or read. ``file_member``: the column named by
    each row's file extension (:func:`file_member_of` when writing; the manifest's when reading),
    the first member of every sample."""
    cls = _cls_field(schema)
    members: list[Member] = []
    js: list[Field] = []
    for f in schema:
        if f is cls:
            members.append(Member("cls", CLS, f))
        elif f.kind == BINARY and f.name == file_member:
            members.append(Member(f.name, RAW, f, per_file=True))
        elif f.kind == BINARY or (f.kind == FIXED and f.np_dtype.kind == "S" and not f.shape):
            members.append(Member(f.name, RAW, f))
        elif f.kind == SEQUENCE or (f.kind == FIXED and f.shape):
            if f.np_dtype.kind not in "biuf":
                where = f"{source}, column '{f.name}'" if source else f"column '{f.name}'"
                raise SchemaError(
                    f"{where}: rows of {f.describe()} arrays; lovecraft's WebDataset .npy members hold numbers",
                    hint="leave the column out with --columns, or write another format",
                )
            members.append(Member(f"{f.name}.npy", NPY, f))
        else:
            if f.kind == FIXED and f.np_dtype.kind not in "biufU":
                where = f"{source}, column '{f.name}'" if source else f"column '{f.name}'"
                raise SchemaError(
                    f"{where}: {f.np_dtype.name} values have no JSON form",
                    hint="leave the column out with --columns, or write another format",
                )
            js.append(f)
    if js:  # <key>.json, or <key>.meta.json beside a column of that name (a WebDataset's own .json)
        taken = {m.ext.lower() for m in members}
        members.append(Member("meta.json" if "json" in taken else "json", JSON, None))

    def where(f: Field) -> str:
        return f"{source}, column '{f.name}'" if source else f"column '{f.name}'"

    seen: dict[str, Member] = {}
    for m in members:
        if m.field is not None and (not m.field.name or "/" in m.field.name or "\0" in m.field.name):
            raise SchemaError(
                f"{where(m.field)}: a WebDataset member is named <key>.<column>; this column's name cannot be an "
                "extension (empty, or with / or NUL)",
                hint="rename the column (--column-names for CSV), or leave it out with --columns",
            )
        low = m.ext.lower()
        if low in seen:
            mine, other = (m, seen[low]) if m.field is not None else (seen[low], m)
            what = (
                f"column '{other.field.name}''s .{other.ext}"
                if other.field
                else f"the .{other.ext} member of the other columns"
            )
            raise SchemaError(
                f"{where(mine.field)}: its member .{mine.ext} and {what} are one extension to WebDataset, which "
                "lowercases them",
                hint="rename one of the columns, or leave one out with --columns",
            )
        seen[low] = m
    members.sort(key=lambda m: (not m.per_file, m.ext))
    return Plan(members, js)


def key(row: int) -> str:
    return f"{row:0{KEY_DIGITS}d}"


KEY_RE = re.compile(rf"^[0-9]{{{KEY_DIGITS},}}$")


# --------------------------------------------------------------------------------------------
# .npy members
# --------------------------------------------------------------------------------------------


def npy_dtype(f: Field) -> np.dtype:
    dt = f.np_dtype
    return dt.newbyteorder("<") if dt.itemsize > 1 and dt.byteorder == ">" else dt


@functools.lru_cache(maxsize=4096)
def npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    """NumPy's .npy header (version 1.0) of a C-order array, as ``np.save`` writes it."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# the .json member
# --------------------------------------------------------------------------------------------


def _float_text(x: float) -> str:
    if math.isfinite(x):
        return repr(x)
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def json_texts(f: Field, col, n: int) -> list[str]:
    """Each row's value of column ``f`` as JSON text."""
    if f.kind == FIXED:
        arr = np.asarray(col).reshape(n)
        if arr.dtype.kind == "f":
            return [_float_text(x) for x in arr.astype(np.float64).tolist()]
        if arr.dtype.kind == "b":
            return ["true" if x else "false" for x in arr.tolist()]
        if arr.dtype.kind == "U":
            return [json.dumps(x, ensure_ascii=False) for x in arr.tolist()]
        return [str(x) for x in arr.tolist()]
    if f.kind == STRING_LIST:
        return [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in col.to_pylist(STRING_LIST)]
    return [json.dumps(s, ensure_ascii=False) for s in col.to_pylist(STRING)]


def json_rows(fields: list[Field], cols: list, n: int) -> list[bytes]:
    """The .json member of each of ``n`` rows: an object of ``fields`` in schema order."""
    parts = [
        [f"{json.dumps(f.name, ensure_ascii=False)}:{t}" for t in json_texts(f, c, n)]
        for f, c in zip(fields, cols, strict=True)
    ]
    return [("{" + ",".join(row) + "}").encode("utf-8") for row in zip(*parts, strict=True)]


class DecodeProblem(Exception):
    """A member that is not what its column's layout says."""


def json_columns(fields: list[Field], texts: list[bytes], first: int) -> dict:
    """The columns ``fields`` of rows whose .json members are ``texts`` (``first``: the first row's
    number, for messages)."""
    n = len(texts)
    vals: dict[str, list] = {f.name: [None] * n for f in fields}
    names = {f.name for f in fields}
    for i, t in enumerate(texts):
        try:
            obj = json.loads(t.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise DecodeProblem(f"row {first + i}: its .json member is not JSON ({e})") from None
        if not isinstance(obj, dict) or set(obj) != names:
            raise DecodeProblem(f"row {first + i}: its .json member does not hold exactly the columns {sorted(names)}")
        for k, v in obj.items():
            vals[k][i] = v
    out = {}
    for f in fields:
        out[f.name] = _json_column(f, vals[f.name], first)
    return out


def _json_column(f: Field, vals: list, first: int):
    def bad(i: int, what: str) -> DecodeProblem:
        return DecodeProblem(f"row {first + i}: '{f.name}' in its .json member is {what}")

    n = len(vals)
    if f.kind == STRING_LIST:
        for i, v in enumerate(vals):
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise bad(i, "not a list of strings")
        return VarColumn.from_string_lists(vals)
    if f.kind == STRING or f.np_dtype.kind == "U":
        for i, v in enumerate(vals):
            if not isinstance(v, str):
                raise bad(i, "not a string")
        if f.kind == FIXED:
            return np.array(vals, dtype=f.np_dtype) if n else np.zeros(0, f.np_dtype)
        data = [v.encode("utf-8") for v in vals]
        return (
            VarColumn.from_pylist(data, np.uint8) if data else VarColumn(np.zeros(0, np.uint8), np.zeros(1, np.int64))
        )
    dt = f.np_dtype
    if dt.kind == "b":
        for i, v in enumerate(vals):
            if not isinstance(v, bool):
                raise bad(i, "not true or false")
        return np.array(vals, dtype=np.bool_)
    if dt.kind in "iu":
        for i, v in enumerate(vals):
            if not isinstance(v, int) or isinstance(v, bool):
                raise bad(i, "not an integer")
        try:
            return np.array(vals, dtype=dt) if n else np.zeros(0, dt)
        except OverflowError:
            i = next(i for i, v in enumerate(vals) if not np.iinfo(dt).min <= v <= np.iinfo(dt).max)
            raise bad(i, f"{vals[i]}, outside {dt.name}") from None
    for i, v in enumerate(vals):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise bad(i, "not a number")
    wide = np.array(vals, dtype=np.float64) if n else np.zeros(0, np.float64)
    out = wide.astype(dt)
    lost = (out.astype(np.float64) != wide) & ~np.isnan(wide)
    if lost.any():
        i = int(np.flatnonzero(lost)[0])
        raise bad(i, f"{vals[i]}, not a {dt.name} value")
    return out
