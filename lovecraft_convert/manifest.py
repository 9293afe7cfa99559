"""The dataset manifest, ``_manifest.json``: its name, version, building, reading and checking.

Every command that writes a dataset builds its manifest with :func:`build`, the commit writes it
with :func:`write` (last, after every data file), and every reader (``open_dataset``, ``verify``,
``inspect``, ``bucket`` and ``convert`` reading a dataset) goes through :func:`read` and
:func:`problems` / :func:`parse_schema`. Nothing else spells the file name or the version.

The name starts with ``_`` because pyarrow, pandas, dask and Spark skip such files when they read a
directory of Parquet files (a ``manifest.json`` makes them fail to read the schema).
"""

from __future__ import annotations

import datetime
import json
import os
import posixpath
from collections.abc import Iterator
from typing import Any

from .errors import DatasetError
from .runtime.hashing import DEFAULT_HASH as DEFAULT_HASH  # the hashes are the runtime's: a file's
from .runtime.hashing import HASHES as HASHES  # entry holds its digest under the algorithm's name
from .version import __version__

MANIFEST_NAME = "_manifest.json"
FORMAT_TAG = "lovecraft-dataset"
VERSION = 1
READABLE_VERSIONS = (1,)
MAX_MANIFEST_BYTES = 64 << 20  # a manifest is read whole: larger ones are refused unread (and never written)
MAX_ROW_BYTES = 1 << 30  # a schema claiming larger rows is refused (nothing that size is allocated)


def build(
    *,
    command: str,
    output_format: str,
    options: dict[str, Any],
    rows: int,
    schema: list[dict],
    sources: list[dict],
    files: list[dict],
    stats: dict,
    float16: dict | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """A complete manifest. ``sections``: ``shards`` or ``buckets``, and any command- or format-specific
    keys (``shuffle``, ``bucketing``, the format's own keys), kept in the order given."""
    m: dict[str, Any] = {
        "format": FORMAT_TAG,
        "version": VERSION,
        "complete": True,
        "created_by": f"lovecraft_convert {__version__}",
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command,
        "output_format": output_format,
        "options": options,
        "rows": rows,
        "schema": schema,
    }
    extra = dict(sections)
    for key in ("shuffle", "shards", "buckets", "bucketing"):
        if key in extra:
            m[key] = extra.pop(key)
    m.update({"files": files, "stats": stats, "float16": float16 or {}, "sources": sources})
    m.update(extra)
    return m


def file_digest(entry: dict) -> tuple[str, str] | tuple[None, None]:
    """(algorithm, hex digest) of a file entry: the first of ``HASHES`` it holds, or (None, None)."""
    for name in HASHES:
        if name in entry:
            return name, entry[name]
    return None, None


def not_a_dataset(path: str) -> DatasetError:
    """The error for a local ``path`` that is no directory: absent, or a file (an input, given
    where the dataset goes: ``verify DIR --against FILE`` checks a dataset against it)."""
    if os.path.isfile(path):
        return DatasetError(
            f"{path}: a file, not a dataset directory",
            hint="give the output directory of lovecraft (to check it against this file: verify DIR --against FILE)",
        )
    stopped = interrupted(path)
    if stopped is not None:
        return DatasetError(stopped[0], hint=stopped[1])
    return DatasetError(f"{path}: no such dataset directory", hint="give the output directory of lovecraft")


def interrupted(path: str) -> tuple[str, str] | None:
    """(message, hint) for an absent output whose run stopped before its commit (its work is in
    ``.<name>.partial`` beside it), or None."""
    head, tail = os.path.split(os.path.normpath(path))
    partial = os.path.join(head, f".{tail}.partial")
    if not tail or not os.path.isdir(partial):
        return None
    return (
        f"{path}: no dataset yet: the work of an interrupted run is in {partial}",
        "run the same shard or bucket command again with --resume to finish it (a convert starts again)",
    )


def path_of(directory: str) -> str:
    return os.path.join(directory, MANIFEST_NAME)


def write(directory: str, manifest: dict) -> None:
    """Write the manifest of ``directory`` durably: a temporary name, fsync, then the rename."""
    final = path_of(directory)
    tmp = final + ".tmp"
    text = dumps(manifest)
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, final)


def dumps(manifest: dict) -> str:
    """The manifest as JSON: each key on a line of its own, and each entry of a list or object
    (a column's statistics, a file, an option) on one line. Written so, by the json module's C
    encoder a line at a time, rather than indented throughout by its Python encoder: 2,000
    columns' manifest in 28 instead of 67 ms, and two thirds of the size."""
    enc = json.JSONEncoder(default=_json_default, ensure_ascii=True).encode
    lines = []
    for key, value in manifest.items():
        head = f" {enc(key)}: "
        if isinstance(value, dict) and value:
            inner = [f"  {enc(k)}: {enc(v)}" for k, v in value.items()]
            lines.append(head + "{\n" + ",\n".join(inner) + "\n }")
        elif isinstance(value, list) and value:
            lines.append(head + "[\n" + ",\n".join(f"  {enc(v)}" for v in value) + "\n ]")
        else:
            lines.append(head + enc(value))
    text = "{\n" + ",\n".join(lines) + "\n}\n"
    if len(text) > MAX_MANIFEST_BYTES:  # (ASCII: characters are bytes) no reader would open it
        from .errors import OutputError

        raise OutputError(
            f"the manifest would take {len(text)} bytes, more than the {MAX_MANIFEST_BYTES} every reader accepts",
            hint="write fewer, larger shards (--shard-size, --num-shards) or fewer columns",
        )
    return text


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def load(directory: str) -> tuple[dict | None, tuple[str, str] | None]:
    """The parsed manifest of ``directory``, or ``(None, (kind, message))`` saying why it cannot be read."""
    import stat

    mpath = path_of(directory)
    try:
        st = os.lstat(mpath)
    except FileNotFoundError:
        return None, ("missing", "missing: not a lovecraft dataset, or the run that wrote it did not finish")
    except OSError as e:
        return None, ("manifest", f"cannot be read ({e.strerror})")
    if not stat.S_ISREG(st.st_mode):
        return None, ("manifest", "not a regular file")
    if st.st_size > MAX_MANIFEST_BYTES:
        return None, ("manifest", too_large(st.st_size))
    try:
        with open(mpath, encoding="utf-8") as f:
            return json.load(f), None
    except (OSError, ValueError, RecursionError) as e:
        text = " ".join(str(e).split())
        return None, ("unreadable", f"unreadable ({text[:297] + '...' if len(text) > 300 else text})")


def too_large(size: int) -> str:
    """Why a manifest of ``size`` bytes is not read."""
    return f"{size} bytes, more than the {MAX_MANIFEST_BYTES} a manifest may take (not read)"


def read(directory: str) -> dict[str, Any]:
    """The manifest of dataset directory ``directory``; DatasetError when it is missing or unreadable."""
    m, problem = load(directory)
    if problem is not None:
        kind, message = problem
        if kind == "missing":
            raise DatasetError(
                f"{directory}: no {MANIFEST_NAME}; not a lovecraft dataset, or its writing did not finish",
                hint="give the output directory of a completed `lovecraft convert`/`shard` run",
            )
        if kind == "unreadable":
            message = "unreadable manifest" + message[len("unreadable") :]
        raise DatasetError(f"{path_of(directory)}: {message}", hint="re-create the dataset")
    if not isinstance(m, dict) or m.get("format") != FORMAT_TAG:
        raise DatasetError(
            f"{path_of(directory)}: not a lovecraft dataset manifest", hint="give a directory lovecraft wrote"
        )
    return m


def problems(m: Any) -> list[tuple[str, str, str | None]]:
    """What makes a manifest unreadable by this version: ``(kind, message, hint)``, the worst first
    (kind ``manifest``: not ours or an unknown version; ``incomplete``; ``keys``: a key every reader
    needs is missing). Empty when none of these holds."""
    out: list[tuple[str, str, str | None]] = []
    if not isinstance(m, dict) or m.get("format") != FORMAT_TAG:
        return [("manifest", f"not a lovecraft dataset manifest (format is not '{FORMAT_TAG}')", None)]
    version = m.get("version")
    if version not in READABLE_VERSIONS:
        return [
            (
                "manifest",
                f"manifest version {version!r} is unknown to lovecraft_convert {__version__} "
                f"(it reads version {', '.join(map(str, READABLE_VERSIONS))})",
                "upgrade lovecraft_convert, or re-create the dataset with this version",
            )
        ]
    if m.get("complete") is not True:
        out.append(
            (
                "incomplete",
                "does not say complete: true (the run that wrote it did not finish)",
                "run it again (`lovecraft shard ... --resume` resumes)",
            )
        )
    for key in ("rows", "schema", "files"):
        if key not in m:
            out.append(("keys", f"the manifest has no '{key}'", "re-create the dataset"))
    if "shards" not in m and "buckets" not in m:
        out.append(("keys", "the manifest lists no shards", "re-create the dataset"))
    return out


def check(m: Any, where: str) -> None:
    """Refuse (DatasetError) what this version cannot read: not ours, unknown version, incomplete."""
    found = problems(m)
    if found:
        kind, message, hint = found[0]
        if kind == "incomplete":
            message = f"the dataset is incomplete (its manifest {message})"
        raise DatasetError(f"{where}: {message}", hint=hint or "give a directory lovecraft wrote", kind=kind)


def parse_schema(items: Any):
    """The manifest's ``schema`` as a :class:`~lovecraft_convert.schema.Schema`, checked: known kinds,
    dtypes lovecraft writes, shapes of counts, unique names, rows of at most 1 GiB. ValueError
    (or TypeError/KeyError) says what is wrong."""
    import numpy as np

    from .schema import KINDS, Field, Schema

    fields = []
    for d in items:
        f = Field.from_dict(d)
        if f.kind not in KINDS or not isinstance(f.name, str):
            raise ValueError(f"column {f.name!r}: unknown kind {f.kind!r}")
        if not all(isinstance(s, int) and s >= 0 for s in f.shape):
            raise ValueError(f"column {f.name!r}: bad shape")
        dt = f.np_dtype
        if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
            raise ValueError(f"column {f.name!r}: dtype {f.dtype!r} is not one lovecraft writes")
        if f.kind in ("string", "binary") and dt != np.dtype(np.uint8):
            raise ValueError(f"column {f.name!r}: a {f.kind} column holds uint8 values, not {dt}")
        if dt.itemsize * f.row_size > MAX_ROW_BYTES:
            raise ValueError(f"column {f.name!r}: one row of {dt.itemsize * f.row_size} bytes (refused)")
        fields.append(f)
    if not fields or len({f.name for f in fields}) != len(fields):
        raise ValueError("no columns, or a column named twice")
    return Schema(tuple(fields))


# --------------------------------------------------------------------------------------------
# the paths a manifest names: inside the dataset directory, or refused
# --------------------------------------------------------------------------------------------

OUTSIDE = "points outside the dataset directory"


def relative_path(raw: Any) -> str | None:
    """``raw`` (a file path of a manifest) as a normalised relative path inside the dataset, or None
    when it names no such path: absolute, with ``..`` or ``.`` or empty parts, backslashes or NUL.
    Subdirectories are fine (``run-20261124-ab12/part-0.parquet``)."""
    if not isinstance(raw, str) or not raw or "\x00" in raw or "\\" in raw:
        return None
    if raw.startswith("/") or posixpath.isabs(raw):
        return None
    if any(x in ("", ".", "..") for x in raw.split("/")):
        return None
    return posixpath.normpath(raw)


def escapes(root: str, rel: str) -> bool:
    """Does ``rel`` (relative, see :func:`relative_path`) lead outside ``root`` once symbolic links
    (of the file or of a directory on its way) are resolved?"""
    from .storage.uri import is_remote

    if is_remote(root):  # an object store has no links: the lexical check is all there is
        return False
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root, rel))
    return os.path.commonpath([real_root, real]) != real_root


def outside(root: str, raw: Any) -> str | None:
    """Why the manifest path ``raw`` leaves dataset directory ``root`` (lexically, or through a
    symbolic link), as the end of a message; None when it stays inside."""
    rel = relative_path(raw)
    if rel is None:
        return f"path {raw!r} {OUTSIDE}"
    if escapes(root, rel):
        return f"path {raw!r} {OUTSIDE} (through a symbolic link)"
    return None


def named_paths(m: dict) -> Iterator[tuple[str, Any]]:
    """``(where, raw path)`` of every file path the manifest names: ``files[i]``, ``shards[i]``,
    ``buckets[i]`` and ``buckets[i].shards[j]`` (whatever their shape, nothing assumed)."""

    def listed(v: Any) -> list:
        return v if isinstance(v, list) else []

    for i, f in enumerate(listed(m.get("files"))):
        yield f"files[{i}]", f.get("path") if isinstance(f, dict) else f
    for key in ("shards", "buckets"):
        for i, s in enumerate(listed(m.get(key))):
            if not isinstance(s, dict):
                continue
            for raw in listed(s.get("files")):
                yield f"{key}[{i}]", raw
            for j, sub in enumerate(listed(s.get("shards")) if key == "buckets" else []):
                for raw in listed(sub.get("files")) if isinstance(sub, dict) else []:
                    yield f"{key}[{i}].shards[{j}]", raw


def check_paths(root: str, m: dict) -> None:
    """Refuse (DatasetError) a manifest naming a file outside dataset directory ``root``: every
    reader of a dataset calls this before opening any of its files. The first such path is named."""
    for where, raw in named_paths(m):
        why = outside(root, raw)
        if why is not None:
            raise DatasetError(
                f"{path_of(root)}: {where}: {why}",
                hint="the manifest was edited; re-create the dataset",
                kind="manifest",
            )


def file_path(root: str, rel: str) -> str:
    """The full path of manifest path ``rel`` of dataset ``root``; DatasetError when it leaves it."""
    why = outside(root, rel)
    if why is not None:
        raise DatasetError(
            f"{path_of(root)}: {why}", hint="the manifest was edited; re-create the dataset", kind="manifest"
        )
    from .storage.uri import child_path

    return child_path(root, rel)


def is_dataset(path: str) -> bool:
    """Is ``path`` a directory holding a manifest (a dataset, complete or not)?"""
    return os.path.isdir(path) and os.path.isfile(path_of(path))


def section_files(m: dict) -> dict[str, dict]:
    """The files a format's own sections of manifest ``m`` name besides ``files`` (an index of
    buckets: ``hdf5_index``), by path: every top-level object holding a string ``path``, a count
    ``bytes`` and a digest (``HASHES``), as :func:`build` writes a file's entry. What a copy of the
    dataset (an object store's commit, a local cache) carries beside ``files``; a format checks its
    own (its descriptor's ``extra_files``)."""
    out = {}
    for v in m.values() if isinstance(m, dict) else ():
        named = isinstance(v, dict) and isinstance(v.get("path"), str) and isinstance(v.get("bytes"), int)
        if named and file_digest(v)[0] is not None:
            out[v["path"]] = v
    return out


def shard_entries(frags: list[dict]) -> list[dict]:
    """The manifest's ``shards`` from the write units' journal fragments."""
    keys = ("index", "name", "rows", "files", "stats")
    return [
        dict(
            zip(keys, (fr["shard"], fr["name"], fr["rows"], [f["path"] for f in fr["files"]], fr["stats"]), strict=True)
        )
        for fr in frags
    ]


def unit_files(frags: list[dict], keys: tuple[str, ...] = ("shard",)) -> list[dict]:
    """The manifest's ``files`` from the write units' fragments, each tagged with its unit's ``keys``."""
    return [{**f, **{k: fr[k] for k in keys}} for fr in frags for f in fr["files"]]


def build_job(command: str, o: Any, rows: int, schema: Any, hash_buckets: int | None, **fields: Any) -> dict[str, Any]:
    """:func:`build` for a job of units (shard, bucket): the format, options, schema and shuffle
    come from its options ``o`` (``to``, ``to_dict()``, ``shuffle``, ``seed``) and ``schema``."""
    shuffle = {"seed": o.seed, "buckets": hash_buckets} if o.shuffle else None
    return build(
        command=command, output_format=o.to, options=o.to_dict(), rows=rows, schema=schema.to_list(), shuffle=shuffle,
        **fields,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# the manifest's shape: every field a reader relies on, of the type it relies on
# --------------------------------------------------------------------------------------------


def _shown(v: Any) -> str:
    """A manifest value as a message shows it (JSON, at most 60 characters)."""
    try:
        text = json.dumps(v, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Spec:
    """What a manifest value must be. :meth:`walk` yields ``(field path, why)`` for each problem of
    a value (containers name the item: ``shards[3].rows``, ``tfrecord.blocks["a.tfrecord"]``)."""

    what = "anything"
    plural = "values"  # what a list of them holds

    def walk(self, v: Any, path: str) -> Iterator[tuple[str, str]]:
        return iter(())


class Atom(Spec):
    def __init__(self, what: str, test, plural: str) -> None:
        self.what, self.test, self.plural = what, test, plural

    def walk(self, v, path):
        if not self.test(v):
            yield path, f"is {_shown(v)}, not {self.what}"


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    import math

    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _dtype(v: Any) -> bool:
    """A NumPy dtype string naming plain numbers, or fixed-width bytes or text (what lovecraft writes:
    the last from NPY, NPZ and HDF5 inputs' ``S``/``U`` arrays)."""
    if not isinstance(v, str) or len(v) > 16:
        return False
    import numpy as np

    try:
        dt = np.dtype(v)
    except (TypeError, ValueError):
        return False
    return dt.kind in "biufSU" and dt.fields is None and dt.subdtype is None


ANY = Spec()
STR = Atom("a string", lambda v: isinstance(v, str), "strings")
COUNT = Atom("a count", lambda v: _int(v) and v >= 0, "counts")
POSITIVE = Atom("a positive count", lambda v: _int(v) and v > 0, "positive counts")
INT = Atom("an integer", _int, "integers")
NUMBER = Atom("a number", _number, "numbers")
BOOL = Atom("true or false", lambda v: isinstance(v, bool), "booleans")
HEX64 = Atom(
    "a digest of 64 hex digits",
    lambda v: isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v),
    "digests",
)
DTYPE = Atom("a dtype of numbers or fixed-width text (such as '<f4' or '<U8')", _dtype, "dtypes")


class OneOf(Spec):
    def __init__(self, *values: Any) -> None:
        self.values = values
        self.what = "one of " + ", ".join(_shown(x) for x in values)
        self.plural = "values each " + self.what

    def walk(self, v, path):
        if not any(v == x and type(v) is type(x) for x in self.values):
            yield path, f"is {_shown(v)}, not {self.what}"


class Null(Spec):
    def __init__(self, spec: Spec) -> None:
        self.spec, self.what, self.plural = spec, f"{spec.what} or null", f"{spec.plural} or nulls"

    def walk(self, v, path):
        if v is not None:
            for at, why in self.spec.walk(v, path):
                yield at, why.replace(f"not {self.spec.what}", f"not {self.what}") if at == path else why


class ListOf(Spec):
    def __init__(self, item: Spec, least: int = 0) -> None:
        self.item, self.least = item, least
        self.what = f"a list of {item.plural}" if item is not ANY else "a list"
        self.plural = "lists"

    def walk(self, v, path):
        if not isinstance(v, list):
            yield path, f"is {_shown(v)}, not {self.what}"
            return
        if len(v) < self.least:
            yield path, f"is empty, not {self.what}"
        for i, x in enumerate(v):
            yield from self.item.walk(x, f"{path}[{i}]")


class Pair(Spec):
    """A list of exactly ``len(items)`` values (``[bytes, count]``)."""

    def __init__(self, *items: Spec) -> None:
        self.items = items
        self.what = "[" + ", ".join(s.what for s in items) + "]"
        self.plural = f"pairs {self.what}"

    def walk(self, v, path):
        if not isinstance(v, list) or len(v) != len(self.items):
            yield path, f"is {_shown(v)}, not {self.what}"
            return
        for i, (x, s) in enumerate(zip(v, self.items, strict=True)):
            yield from s.walk(x, f"{path}[{i}]")


class MapOf(Spec):
    """An object of any keys whose values are ``value``s."""

    def __init__(self, value: Spec) -> None:
        self.value = value
        self.what = f"an object of {value.plural}" if value is not ANY else "an object"
        self.plural = "objects"

    def walk(self, v, path):
        if not isinstance(v, dict):
            yield path, f"is {_shown(v)}, not {self.what}"
            return
        for k, x in v.items():
            yield from self.value.walk(x, f"{path}[{json.dumps(k)}]")


class Obj(Spec):
    """An object with ``required`` keys and ``optional`` ones (other keys are allowed: a later
    version may add some)."""

    def __init__(
        self,
        required: dict[str, Spec],
        optional: dict[str, Spec] | None = None,
        what: str = "an object",
        plural: str = "objects",
    ) -> None:
        self.required, self.optional, self.what, self.plural = required, optional or {}, what, plural

    def walk(self, v, path):
        if not isinstance(v, dict):
            yield path, f"is {_shown(v)}, not {self.what}"
            return
        for k, s in self.required.items():
            if k not in v:
                yield _join(path, k), "is missing"
            else:
                yield from s.walk(v[k], _join(path, k))
        for k, s in self.optional.items():
            if k in v:
                yield from s.walk(v[k], _join(path, k))


def _common() -> Spec:
    """The fields every reader relies on (the format's own sections are its descriptor's
    ``manifest_spec``)."""
    from .schema import KINDS

    stats_column = Obj(
        {}, {k: Null(COUNT) for k in ("count", "nan", "length_min", "length_max")} | {"length_mean": Null(NUMBER)}
    )
    stats = MapOf(Null(stats_column))
    shard = Obj(
        {"rows": COUNT, "files": ListOf(STR)}, {"index": COUNT, "name": STR, "stats": Null(stats)}, "a shard", "shards"
    )
    tokenizer = Obj(
        {"name": STR},
        {"path": STR, "vocab_size": Null(POSITIVE), "dtype": DTYPE, "eos_id": Null(INT), "bos_id": Null(INT),
         "column": Null(STR)},
    )  # fmt: skip
    counts = ("input_sequences", "dropped_shorter", "dropped_longer", "truncated", "tokens_removed_by_truncation",
              "rows", "tokens", "longest", "padded_tokens", "single_bucket_padded_tokens")  # fmt: skip
    layout = OneOf("padded", "ragged")
    return Obj(
        {
            "output_format": STR,
            "rows": COUNT,
            "schema": ListOf(
                Obj(
                    {"name": STR, "kind": OneOf(*KINDS), "dtype": DTYPE},
                    {"shape": ListOf(COUNT)},
                    "a column",
                    "columns",
                ),
                1,
            ),
            "files": ListOf(
                Obj(
                    {"path": STR, "rows": COUNT, "bytes": COUNT},
                    {
                        "blake3": HEX64,
                        "sha256": HEX64,
                        "column": Null(STR),
                        "role": Null(STR),
                        "shard": COUNT,
                        "bucket": COUNT,
                    },
                    "a file",
                    "files",
                )
            ),
        },
        {
            "command": Null(STR),
            "options": Null(MapOf(ANY)),
            "shards": ListOf(shard),
            "buckets": ListOf(
                Obj(
                    {"min_length": COUNT, "max_length": COUNT, "rows": COUNT, "files": ListOf(STR)},
                    {
                        "index": COUNT,
                        "layout": layout,
                        "shards": ListOf(shard),
                        "tokens": COUNT,
                        "padded_tokens": COUNT,
                        "padding_efficiency": NUMBER,
                        "stats": Null(stats),
                    },
                    "a bucket",
                    "buckets",
                )
            ),
            "stats": Null(stats),
            "float16": Null(
                MapOf(
                    Obj(
                        {},
                        {k: COUNT for k in ("values", "overflow", "clipped", "flushed_to_zero", "nan")}
                        | {"target": STR, "max_abs_error": NUMBER, "max_rel_error": NUMBER},
                    )
                )
            ),
            "sources": Null(ListOf(ANY)),
            "shuffle": Null(Obj({}, {"seed": Null(INT), "buckets": Null(COUNT)})),
            "tokenizer": Null(tokenizer),
            "bucketing": Obj(
                {"boundaries": ListOf(COUNT), "layout": layout},
                {k: COUNT for k in counts}
                | {
                    "pad_id": NUMBER,
                    "dtype": DTYPE,
                    "tokenizer": Null(tokenizer),
                    "padding_efficiency": NUMBER,
                    "padded_tokens_saved": INT,
                    "length_histogram": Pair(ListOf(COUNT), ListOf(COUNT)),
                },
            ),  # fmt: skip
            "packing": Obj(
                {"seq_len": POSITIVE, "rows": COUNT, "tokens": COUNT, "documents": COUNT},
                {
                    "order": OneOf("input", "shuffled"),
                    "dtype": DTYPE,
                    "tokenizer": Null(tokenizer),
                    "dropped_tokens": COUNT,
                    "dropped_partial_row": BOOL,
                    "pad_last": BOOL,
                    "pad_id": NUMBER,
                    "padding_tokens": COUNT,
                    "padding_efficiency": NUMBER,
                },
            ),  # fmt: skip
        },
    )


_COMMON: list[Spec] = []


def shape_problems(m: Any, extra: Spec | None = None, limit: int = 20, common: bool = True) -> list[tuple[str, str]]:
    """``(field path, why)`` of the first ``limit`` fields of manifest ``m`` that are not of the type
    its readers rely on: the common fields (unless ``common`` is False) and ``extra`` (a format's
    own sections). Values are not judged against each other or the files here."""
    if not _COMMON:
        _COMMON.append(_common())
    specs = ([_COMMON[0]] if common else []) + ([extra] if extra is not None else [])
    out: list[tuple[str, str]] = []
    for spec in specs:
        for problem in spec.walk(m, ""):
            out.append(problem)
            if len(out) >= limit:
                return out
    return out


EDITED = "the manifest was edited or damaged; re-create the dataset"


def check_shape(m: Any, where: str, extra: Spec | None = None, common: bool = True) -> None:
    """Refuse (DatasetError, one line naming the manifest ``where`` and the field) a manifest one
    of whose fields is not of the type its readers rely on (:func:`shape_problems`)."""
    found = shape_problems(m, extra, limit=1, common=common)
    if found:
        path, why = found[0]
        raise DatasetError(f"{where}: {path} {why}", hint=EDITED, kind="manifest")


def schema_of(m: dict, where: str):
    """The manifest's schema, checked (:func:`parse_schema`); DatasetError naming ``where``."""
    try:
        return parse_schema(m.get("schema"))
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        text = " ".join(str(e).split())[:300]
        raise DatasetError(f"{where}: schema: {text}", hint=EDITED, kind="manifest") from None
