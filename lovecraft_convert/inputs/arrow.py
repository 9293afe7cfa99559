"""Arrow IPC input (``.arrow``/``.feather`` files, IPC streams) and Hugging Face ``save_to_disk``
directories (``state.json`` listing ``data-00000-of-0000N.arrow`` IPC streams), streamed by record
batch.

Files are memory-mapped: a record batch of an uncompressed file is a view of the map (page cache,
not the process's memory), and is converted in slices of at most a batch of the memory budget.
Every batch is validated in full before it is read (offsets inside their buffers...), so a damaged
file is an error, not a crash. Record batches are the blocks of parts; an IPC stream cannot seek,
so finding them (for ``shard``) is one pass over the stream's messages.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from ..errors import InputError
from .columnar import DAMAGED, Block, ColumnarReader, SourceFile, guarded, reading
from .decoded import ROW_SHARE, bounded

FEATHER_V1 = b"FEA1"


def _open_ipc(path: str, name: str, fields: list[int] | None = None):
    """An IPC file or stream reader over a memory map of ``path``: ``(reader, "file" | "stream")``;
    ``fields``: the top-level fields to read (the others are neither decompressed nor touched)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from ..storage import is_remote, open_input

    with open_input(path, readahead=64 << 10) as fh:
        head = fh.read(8)
    if head.startswith(FEATHER_V1):
        raise InputError(
            f"{name}: a Feather version 1 file (a format Arrow retired), which is not read",
            hint="re-save it with pyarrow.feather.write_feather (version 2)",
        )
    if not head:
        raise InputError(f"{name}: empty input (0 bytes, not an Arrow file)", hint="check the file")
    options = ipc.IpcReadOptions(included_fields=fields) if fields is not None else None
    with reading(name):
        source = pa.PythonFile(open_input(path, buffering=0), mode="r") if is_remote(path) else pa.memory_map(path)
        if head.startswith(b"ARROW1"):
            return ipc.open_file(source, options=options), "file"
        return ipc.open_stream(source, options=options), "stream"


def _batches(reader, kind: str, name: str, b0: int = 0, b1: int | None = None) -> Iterator:
    """Record batches ``[b0, b1)`` of an open IPC file or stream."""
    if kind == "file":
        stop = reader.num_record_batches if b1 is None else b1
        for i in range(b0, stop):
            with reading(name, f"record batch {i}"):
                rb = reader.get_batch(i)
            yield rb
        return
    for i, rb in enumerate(guarded(iter(reader), name)):
        if b1 is not None and i >= b1:
            return
        if i >= b0:
            yield rb


def scan_ipc(path: str, name: str) -> list[tuple[int, int, int]]:
    """(rows, bytes in the file, bytes decoded) of each record batch of an IPC file or stream: from
    its metadata (nothing decompressed), else by reading it."""
    layout = ipc_layout(path)
    if layout is not None:
        return [(b.rows, b.body, b.decoded) for b in layout[0]]
    reader, kind = _open_ipc(path, name)
    return [(rb.num_rows, rb.nbytes, rb.nbytes) for rb in _batches(reader, kind, name)]


def ipc_layout(path: str):
    """(record batches, dictionary batches) of an IPC file or stream as its metadata describes
    them (:mod:`.ipcmeta`), None when it does not parse."""
    from ..storage import open_input
    from .ipcmeta import file_batches, stream_batches

    try:
        with open_input(path, buffering=0, readahead=64 << 10) as fh:
            size = fh.seek(0, 2)
            fh.seek(0)
            head = fh.read(8)
            return (file_batches if head.startswith(b"ARROW1") else stream_batches)(fh, size)
    except OSError:
        return None


def _binary_type(t):
    """``t`` with every string type replaced by its binary type of the same layout."""
    import pyarrow as pa

    if pa.types.is_string(t):
        return pa.binary()
    if pa.types.is_large_string(t):
        return pa.large_binary()
    if pa.types.is_string_view(t):
        return pa.binary_view()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_binary_type(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_binary_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_binary_type(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_binary_type(t.value_type)), t.list_size)
    return t


def validate(rb, name: str, where: str) -> None:
    """A record batch read from a file must be well formed before anything touches its values.
    Invalid UTF-8 alone is left to the converter (it names the row, or replaces it)."""
    import pyarrow as pa

    try:
        rb.validate(full=True)
        return
    except pa.ArrowInvalid as e:
        error = e
    for col in rb.columns:
        try:
            t = _binary_type(col.type)
            (col.view(t) if t != col.type else col).validate(full=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            text = " ".join(str(error).split())[:240]
            raise InputError(f"{name}, {where}: malformed record batch ({text})", hint=DAMAGED) from None


class ArrowReader(ColumnarReader):
    title = "Arrow"

    def open_files(self) -> list[SourceFile]:
        return [self._ipc_file(i, spec.path, spec.name) for i, spec in enumerate(self.specs)]

    def _ipc_file(self, i: int, path: str, name: str) -> SourceFile:
        reader, kind = _open_ipc(path, name)
        info: dict = {"ipc": kind}
        if kind == "file":
            info["record_batches"] = reader.num_record_batches
        return SourceFile(i, path, name, reader.schema, info)

    def load_blocks(self, mapper=None) -> None:
        todo = [f for f in self.files if f.blocks is None]
        if not todo:
            return
        run = mapper or (lambda fn, calls: [fn(*c) for c in calls])
        for f, blocks in zip(todo, run(scan_ipc, [(f.path, f.name) for f in todo]), strict=True):
            f.blocks = [Block(rows, size, decoded) for rows, size, decoded in blocks]
            f.info["record_batches"] = len(blocks)
            f.info["rows"] = sum(r for r, _, _ in blocks)

    def input_details(self, i: int) -> dict:
        """What ``inspect`` shows: with the codec of compressed bodies ("lz4-compressed inside", as a
        Feather file is by default), from the local files' metadata (nothing decompressed)."""
        from ..storage import is_remote

        for f in self.files:
            if f.spec == i and "compression_inside" not in f.info and not is_remote(f.path):
                layout = ipc_layout(f.path)
                codecs = sorted({b.compressed for b in layout[0]} - {""}) if layout is not None else []
                f.info["compression_inside"] = "+".join(codecs)
        out = super().input_details(i)
        if not out.get("compression_inside"):
            out.pop("compression_inside", None)
        return out

    def memory_bytes(self) -> int | None:
        from ..storage import is_remote

        sizes = {s.path: s.size for s in self.specs}
        return sum((sizes.get(f.path) or 0) if is_remote(f.path) else os.path.getsize(f.path) for f in self.files)

    def _fields(self, f: SourceFile) -> list[int] | None:
        """The top-level fields of ``f`` holding the columns read (None: all of them)."""
        tops = list(dict.fromkeys(c.path[0] for c in self.read_columns))
        if len(tops) == len(f.schema.names):
            return None
        return [f.schema.get_field_index(t) for t in tops]

    def _check_decoded(self, f: SourceFile, kind: str, b0: int, b1: int | None) -> None:
        """Refuse a record batch (or the dictionaries) that would decode to more than a quarter of
        the memory budget, before pyarrow decompresses it: a compressed body is decoded whole (and
        a stream's batches before ``b0`` are decoded too, to be skipped). Uncompressed batches of
        a local file are views of its memory map, which cost no memory of the process."""
        from ..storage import is_remote

        layout = ipc_layout(f.path)
        if layout is None:
            return
        batches, dictionaries = layout
        limit = ROW_SHARE * self.options.batch_bytes
        remote = is_remote(f.path)
        held = sum(d.decoded for d in dictionaries if d.compressed or remote)
        hint = (
            f"raise --max-memory (a record batch must fit in {ROW_SHARE}/16 of it), or re-write the file in "
            "smaller record batches (pyarrow: write_table(..., max_chunksize=ROWS))"
        )
        if held > limit:
            raise InputError(
                f"{f.name}: its dictionaries decode to {held} bytes, more than a batch may take under this memory "
                f"budget ({limit})",
                hint=hint,
            )
        stop = len(batches) if b1 is None else min(b1, len(batches))
        for i in range(b0 if kind == "file" else 0, stop):
            b = batches[i]
            if (b.compressed or remote) and b.decoded > limit:
                raise InputError(
                    f"{f.name}, record batch {i}: its {'compressed ' if b.compressed else ''}buffers decode to "
                    f"{b.decoded} bytes, more than a batch may take under this memory budget ({limit})",
                    hint=hint,
                )

    def read_file(self, f: SourceFile, blocks: tuple[int, int] | None, row0: int = 0) -> Iterator[tuple[object, int]]:
        reader, kind = _open_ipc(f.path, f.name, self._fields(f))
        b0, b1 = blocks or (0, None)
        self._check_decoded(f, kind, b0, b1)
        row = row0
        for i, rb in enumerate(_batches(reader, kind, f.name, b0, b1), b0):
            validate(rb, f.name, f"record batch {i}")
            step = max(1, int(self.options.batch_bytes * rb.num_rows // max(1, rb.nbytes)))
            for a in range(0, rb.num_rows, step):  # (dictionaries and views: cut by decoded bytes)
                yield from bounded(rb.slice(a, step), self.options.batch_bytes, f.name, f"record batch {i}", row + a)
            row += rb.num_rows
            self._done += rb.nbytes


class HfReader(ArrowReader):
    """A Hugging Face ``datasets`` directory written by ``save_to_disk``: the Arrow IPC streams
    ``state.json`` lists, in its order (``datasets.load_from_disk`` reads the same)."""

    title = "Hugging Face"

    def open_files(self) -> list[SourceFile]:
        files: list[SourceFile] = []
        for i, spec in enumerate(self.specs):
            for path in _data_files(spec.path):
                files.append(self._ipc_file(i, path, path))
        return files


def _data_files(directory: str) -> list[str]:
    splits = os.path.join(directory, "dataset_dict.json")
    state = os.path.join(directory, "state.json")
    if not os.path.isfile(state) and os.path.isfile(splits):
        try:
            with open(splits, encoding="utf-8") as fh:
                names = [str(s) for s in json.load(fh).get("splits", [])]
        except (OSError, ValueError, AttributeError, RecursionError):
            names = []
        example = os.path.join(directory, names[0] if names else "train")
        raise InputError(
            f"{directory}: a Hugging Face DatasetDict (splits: {', '.join(names) or 'unknown'})",
            hint=f"give one split's directory, e.g. {example}",
        )
    try:
        with open(state, encoding="utf-8") as fh:
            entries = json.load(fh)["_data_files"]
        names = [e["filename"] for e in entries]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:  # (nested too deeply: RecursionError)
        raise InputError(
            f"{state}: not a Hugging Face dataset state ({type(e).__name__}: {' '.join(str(e).split())[:120]})",
            hint="re-save the dataset with save_to_disk",
        ) from None
    paths = []
    for n in names:
        if not isinstance(n, str) or os.path.basename(n) != n or n in ("", ".", ".."):
            raise InputError(f"{state}: lists a data file {n!r} outside the directory", hint="re-save the dataset")
        p = os.path.join(directory, n)
        if not os.path.isfile(p):
            raise InputError(f"{p}: listed in state.json but missing", hint="the dataset is incomplete; re-save it")
        paths.append(p)
    if not paths:
        raise InputError(f"{state}: lists no data files", hint="re-save the dataset with save_to_disk")
    return paths
