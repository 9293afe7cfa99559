"""Files input (``--input-format files``, or a directory holding no dataset and no recognised data
files): a directory tree, or files named one by one or by a glob, one row per file.

Columns: ``path`` (relative to the directory, ``/``-separated), ``bytes`` (the file's bytes,
never decoded unless ``--decode`` asks: then ``image``, ``uint8[H, W, C]``, or ``audio``, float32
samples; see :mod:`.filedecode`), ``label`` when the files sit in folders (ImageFolder: the
int64 index of the top-level folder among the sorted folder names, which the manifest's ``labels``
lists; -1 for a file directly in the root), then the columns of a ``--metadata`` sidecar
(:mod:`.filemeta`). ``--columns path,label`` reads no file at all.

The tree is listed by :mod:`.filetree`: sorted, streamed, in memory that does not grow with the
number of files. Parts for ``shard`` workers are ranges of the listing (about 64 MiB of files, at
most :data:`PART_FILES` files), each starting at a path, so a worker lists only from there. A
file larger than a sixteenth of ``--max-memory`` is refused in one line before it is read (a
batch holds whole files). Decoding runs on a pool of threads (Pillow and libsndfile release the
GIL) when the reader may use several cores (``convert``; a ``shard`` worker is one core).

A file that cannot be read or decoded, whose name is not UTF-8, or that has no sidecar row is one
line naming it, or with ``--on-bad-file skip`` left out and counted (the manifest's
``skipped_files``, and a note in the summary).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import numpy as np

from ..errors import InputError, OptionsError
from ..schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Field, Schema, VarColumn
from .base import Part, Reader, ReadOptions
from .filedecode import (
    MODE_HINT,
    AudioDecoder,
    BadFile,
    FileOptions,
    ImageDecoder,
    ModeChange,
    Skipped,
    TooLarge,
    mode_for,
    ordered_map,
    probe_audio,
    probe_image,
    thread_pool,
)
from .filetree import Entry, holds_a_file, top_directories, walk
from .sources import InputSpec

PART_FILES = 16384  # files of one part at most (decoding costs per file, not per byte)
BATCH_FILES = 4096  # files of one batch at most


@dataclass(frozen=True)
class FilePart(Part):
    """Files ``[first, stop)`` (path components, in the tree's order) of directory ``spec``, or
    ``rows`` (indices) of the files named one by one."""

    first: tuple[str, ...] = ()
    stop: tuple[str, ...] | None = None


class TreeSpec(InputSpec):
    """A directory input whose size (its files' bytes), file count and listing digest are counted
    on first use: by the process that records them (the manifest's sources, the progress bar),
    never by the workers that read a part."""

    def __init__(self, spec: InputSpec, count: Callable[[], tuple[int, int, str]]) -> None:
        self._count_fn = count
        # a tree this process counted already (the spec a reader of the same inputs made): the
        # same listing, not walked again
        self._tree: tuple[int, int, str] | None = spec._tree if isinstance(spec, TreeSpec) else None
        self._notes: dict = {}
        super().__init__(**{f.name: getattr(spec, f.name) for f in fields(InputSpec)})

    def __copy__(self) -> TreeSpec:
        """A copy of the same tree, its count too when it was made (``copy.copy`` would otherwise
        make the plain spec of :meth:`__reduce__`, which a reader wraps and counts again)."""
        new = TreeSpec.__new__(TreeSpec)
        new.__dict__.update(self.__dict__)
        return new

    def _counted(self) -> tuple[int, int, str]:
        if self._tree is None:
            self._tree = self._count_fn()
        return self._tree

    @property  # type: ignore[override]
    def size(self) -> int:
        return self._counted()[1]

    @size.setter
    def size(self, value) -> None:  # the dataclass's __init__ sets it: counted instead
        pass

    @property  # type: ignore[override]
    def notes(self) -> dict:
        files, _, digest = self._counted()
        return {**self._notes, "files": files, "listing_sha256": digest}

    @notes.setter
    def notes(self, value) -> None:
        self._notes = dict(value or {})

    def __reduce__(self):
        """Sent to a worker (a shard unit's inputs) as the plain spec it was made from: the counting
        closure stays with the process that records the counts, and the worker's reader wraps the
        spec again; nothing is counted to pickle it."""
        kw = {f.name: getattr(self, f.name) for f in fields(InputSpec) if f.name not in ("size", "notes")}
        kw["size"] = self._tree[1] if self._tree is not None else None
        kw["notes"] = dict(self._notes)
        return (_plain_spec, (kw,))


def _plain_spec(kw: dict) -> InputSpec:
    return InputSpec(**kw)


class FilesReader(Reader):
    takes_column_types = True  # the sidecar's columns
    takes_file_options = True

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        self.fo = FileOptions.from_dict(options.files)
        self.budget = options.batch_bytes * 16
        self.file_limit = options.batch_bytes  # a batch holds whole files
        self.decoded_limit = 2 * options.batch_bytes  # pixels or samples of one decoded file
        names = ", ".join(s.name for s in specs)
        dirs = [s.is_dir for s in specs]
        if any(dirs) and not all(dirs):
            raise InputError(f"{names}: mixes directories and files", hint="give directories, or files (a glob)")
        self.tree = all(dirs)
        for s in specs:
            if s.is_stdin or "://" in s.path:
                raise InputError(f"{s.name}: a files input is local files or directories", hint="copy them first")
            if s.compression is not None and not s.is_dir:
                s.compression = None  # a .gz file is a file like any other: its bytes are the row
        self.sidecar = None
        skip_path = None
        if self.fo.metadata is not None:
            from .filemeta import Sidecar

            reserved = ("path", "bytes", "image", "audio", "label")
            self.sidecar = Sidecar(self.fo.metadata, self.budget, options.column_types, options.errors, reserved)
            skip_path = os.path.realpath(self.fo.metadata)
        if self.tree:
            self.skip = [self._rel_of(skip_path, s.path) for s in specs]
            self.specs = [TreeSpec(s, self._counter(i)) for i, s in enumerate(specs)]
            classes = sorted({c for s in specs for c in top_directories(s.path)})
            # (a class folder without a file keeps its label, so that splits agree: said in a note)
            self.empty_classes = [
                c for c in classes if not any(holds_a_file(os.path.join(s.path, c)) for s in specs)
            ]  # fmt: skip
            self.listed: list[Entry] = []
        else:
            self.skip = [None]
            root = os.path.commonpath([os.path.dirname(os.path.abspath(s.path)) for s in specs])
            self.listed = []
            for s in specs:
                rel = os.path.relpath(os.path.abspath(s.path), root).split(os.sep)
                self.listed.append(Entry(tuple(rel), s.path, s.size or 0))
            classes = sorted({e.rel[0] for e in self.listed if len(e.rel) > 1})
            self.empty_classes = []
        self.classes = classes
        self.class_index = {c: i for i, c in enumerate(classes)}
        self.decoder = self._decoder()
        self.payload = {None: "bytes", "image": "image", "audio": "audio"}[self.fo.decode]
        self._all = self._fields()
        self.widens = self.sidecar is not None  # the sidecar's CSV or JSON Lines types
        if options.column_types:
            from .filemeta import check_column_types

            check_column_types(options.column_types, [f.name for f in self._all], self.sidecar, "files", names)
        want = options.columns
        if want:
            have = [f.name for f in self._all] + (self.sidecar.schema.names if self.sidecar is not None else [])
            missing = [c for c in want if c not in have]
            if missing:
                raise OptionsError(
                    f"--columns: no column '{missing[0]}' in {names}", hint=f"columns are {', '.join(have)}"
                )
        self.wanted = list(dict.fromkeys(want)) if want else None
        self.read_files = self.wanted is None or self.payload in self.wanted
        self._done = 0
        self.skipped = Skipped()
        if self.sidecar is not None:  # a changed sidecar is a changed input (--resume refuses it)
            first = self.specs[0]
            first.notes = {**(first._notes if isinstance(first, TreeSpec) else first.notes or {}), **self._spec_notes()}

    # -- schema -------------------------------------------------------------------------------

    def _fields(self) -> list[Field]:
        out = [Field("path", STRING, "|u1")]
        if self.decoder is None:
            out.append(Field("bytes", BINARY, "|u1"))
        elif isinstance(self.decoder, ImageDecoder):
            out.append(Field("image", FIXED, "|u1", self.decoder.shape))
        else:
            out.append(Field("audio", SEQUENCE, "<f4"))
        if self.classes:
            out.append(Field("label", FIXED, "<i8"))
        return out

    @property
    def schema(self) -> Schema:  # the sidecar's types may widen (a CSV column read as int, then float)
        fs = list(self._all) + (list(self.sidecar.schema) if self.sidecar is not None else [])
        if self.wanted:
            by = {f.name: f for f in fs}
            fs = [by[c] for c in self.wanted if c in by]
        return Schema(tuple(fs))

    def widen(self, widened: dict[str, str]) -> None:
        if self.sidecar is not None:
            self.sidecar.widen(widened)

    def _spec_notes(self) -> dict:
        st = os.stat(self.fo.metadata)
        return {"metadata": {"path": os.path.abspath(self.fo.metadata), "size": st.st_size, "mtime": st.st_mtime}}

    # -- decoding -----------------------------------------------------------------------------

    def _decoder(self):
        fo = self.fo
        if fo.decode is None:
            return None
        if fo.decode == "image":
            from ..errors import need

            need("PIL.Image", "--decode image", "pip install 'lovecraft-convert[images]'")
            size, mode = fo.image_size, fo.image_mode
            if size is None or mode is None:
                open_part = "shape" if size is None else "mode"  # what the first image gives
                got_size, got_mode = self._probe(lambda data: probe_image(data, self.decoded_limit), open_part)
                size = size or got_size
                first = None if mode else got_mode
                mode = mode or mode_for(got_mode)
                return ImageDecoder(size, mode, fo.resize if fo.image_size else None, self.decoded_limit, first)
            return ImageDecoder(size, mode, fo.resize if fo.image_size else None, self.decoded_limit)
        rate = fo.sample_rate or self._probe(probe_audio, "rate")
        return AudioDecoder(rate, self.decoded_limit)

    def _probe(self, probe, what: str):
        """What the first file that decodes gives (``what``: the shape or mode of the images, the
        rate of the clips, which the flags leave open): the first file, or with --on-bad-file skip
        the first of a hundred that decodes."""
        tries = 100 if self.fo.on_bad_file == "skip" else 1
        first = None
        for k, item in enumerate(self._all_items()):
            try:
                return probe(self._read(item))
            except BadFile as e:
                first = first or f"{self._name(item)} ({e})"
                if k + 1 >= tries:
                    noun = "clip" if what == "rate" else "image"
                    hint = f"the first {noun} gives the {what}: fix or remove it" + (
                        "" if tries > 1 else ", or pass --on-bad-file skip to leave such files out (counted)"
                    )
                    raise InputError(f"{self._name(item)}: {e}", hint=hint) from None
            except TooLarge as e:
                raise self._too_large(item, e) from None
        names = ", ".join(s.name for s in self.specs)
        if first is not None:  # (--on-bad-file skip) every file failed, fewer than ``tries``
            noun = "clip" if what == "rate" else "image"
            raise InputError(f"{names}: no file decodes as {'a' if noun == 'clip' else 'an'} {noun}: {first}, ...",
                             hint="check the files and --decode")  # fmt: skip
        raise InputError(f"{names}: holds no files", hint="check the path")

    def _all_items(self) -> Iterator[tuple[int, Entry]]:
        """(input, file) of every file: the trees in the order given, or the files named."""
        if not self.tree:
            yield from ((0, e) for e in self.listed)
            return
        for i in range(len(self.specs)):
            yield from ((i, e) for e in self._entries(i))

    # -- listing ------------------------------------------------------------------------------

    @staticmethod
    def _rel_of(path: str | None, root: str) -> tuple[str, ...] | None:
        """``path`` (real) as components under ``root``, when it is inside it (the sidecar is no row)."""
        if path is None:
            return None
        real = os.path.realpath(root)
        if not path.startswith(real.rstrip(os.sep) + os.sep):
            return None
        return tuple(os.path.relpath(path, real).split(os.sep))

    def _counter(self, i: int) -> Callable[[], tuple[int, int, str]]:
        def count() -> tuple[int, int, str]:
            h = hashlib.sha256()
            files = total = 0
            for e in self._entries(i):
                files += 1
                total += e.size
                h.update(f"{e.relpath}\0{e.size}\0{e.mtime_ns}\n".encode("utf-8", "surrogateescape"))
            return files, total, h.hexdigest()

        return count

    def _entries(self, i: int, first: tuple[str, ...] = (), stop: tuple[str, ...] | None = None) -> Iterator[Entry]:
        """The files of tree ``i``, from ``first`` to before ``stop``."""
        skip = self.skip[i]
        for e in walk(self.specs[i].path, first, stop):
            if e.rel != skip:
                yield e

    def _name(self, item: tuple[int, Entry]) -> str:
        """The file as the user would name it: under the directory as given, or as matched."""
        i, e = item
        return os.path.join(self.specs[i].name, *e.rel) if self.tree else e.path

    # -- parts --------------------------------------------------------------------------------

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        parts: list[Part] = []
        if not self.tree:
            a = size = 0
            for k, e in enumerate(self.listed):
                if k > a and (size >= target_bytes or k - a >= PART_FILES):
                    parts.append(FilePart(len(parts), 0, rows=(a, k)))
                    a, size = k, 0
                size += e.size
            parts.append(FilePart(len(parts), 0, rows=(a, len(self.listed))))
            return parts
        for i in range(len(self.specs)):
            start: tuple[str, ...] = ()
            n = size = 0
            for e in self._entries(i):
                if n and (size >= target_bytes or n >= PART_FILES):
                    parts.append(FilePart(len(parts), i, first=start, stop=e.rel))
                    start, n, size = e.rel, 0, 0
                n += 1
                size += e.size
            parts.append(FilePart(len(parts), i, first=start, stop=None))
        return parts

    def part_batches(self, part: Part) -> Iterator[Batch]:
        if not isinstance(part, FilePart):
            raise ValueError(f"not a part of a files input: {part!r}")
        self._reset()
        if part.rows is not None:
            items = ((0, e) for e in self.listed[part.rows[0] : part.rows[1]])
        else:
            items = ((part.spec, e) for e in self._entries(part.spec, part.first, part.stop))
        yield from self._read_items(items)

    def batches(self) -> Iterator[Batch]:
        self._reset()
        rows = 0
        items = self._all_items()
        for batch in self._read_items(items):
            rows += batch.num_rows
            yield batch
        if rows == 0 and not self.skipped.count:
            raise InputError(f"{', '.join(s.name for s in self.specs)}: holds no files", hint="check the path")

    # -- rows read where they are (shard without a spill) ---------------------------------------

    @property
    def random_rows(self) -> bool:
        """Every listed file is one row, so ``shard`` (not shuffled) can have each shard's unit read
        its files straight from the tree instead of spilling them first: when no file can be left
        out (``--on-bad-file`` error: a bad file ends the run), and there is nothing to decode (a
        decoding run keeps the split phase, whose parts spread the decoding over the workers
        whatever the number of shards) and no sidecar (whose types may widen late)."""
        return self.fo.on_bad_file != "skip" and self.decoder is None and self.sidecar is None

    def listed_row_bytes(self) -> Iterator[int] | None:
        """Each row's bytes as listed (its file's size), in order, walked again at each call; None
        when rows are not the listed files one to one (see :attr:`random_rows`) or their bytes are
        not the files' (decoded, or not read: ``--columns path,label``)."""
        if not self.random_rows or not self.read_files:
            return None
        if not self.tree:
            return (e.size for e in self.listed)
        return (e.size for _, e in self._all_items())

    def row_count(self) -> int:
        if not self.tree:
            return len(self.listed)
        return sum(int(s.notes["files"]) for s in self.specs)

    def row_marks(self, starts: list[int]) -> list | None:
        """``(tree, path components)`` of the file at each of ``starts`` (None at the end), from one
        listing."""
        if not self.tree:
            return None
        marks: list = []
        want = iter(starts)
        nxt = next(want, None)
        for k, (i, e) in enumerate(self._all_items()):
            while nxt is not None and nxt == k:
                marks.append((i, e.rel))
                nxt = next(want, None)
            if nxt is None:
                break
        while len(marks) < len(starts):
            marks.append(None)
        return marks

    def row_range(self, start: int, stop: int, step_bytes: int, mark: object = None) -> Iterator[Batch]:
        """Files ``[start, stop)`` of the listing; ``mark``: the marks of ``start`` and ``stop``
        (:meth:`row_marks`), where the listing starts and must end. A tree that changed since the
        marks were taken (a file added or removed in between) is one line, not shifted rows."""
        self._reset()
        if not self.tree:
            yield from self._read_items((0, e) for e in self.listed[start:stop])
            return
        first = end = None
        if mark is None:
            items = itertools.islice(self._all_items(), start, stop)
        else:
            first, end = ((m[0], tuple(m[1])) if m is not None else None for m in mark)  # (a list through JSON)
            items = self._between(first, end)
        yield from self._read_items(self._exactly(items, stop - start, first))

    def _between(self, first: tuple[int, tuple[str, ...]], end) -> Iterator[tuple[int, Entry]]:
        """The files from mark ``first`` to before mark ``end`` (None: to the end of the input)."""
        for i in range(first[0], len(self.specs)):
            last = end is not None and end[0] == i
            yield from ((i, e) for e in self._entries(i, first[1] if i == first[0] else (), end[1] if last else None))
            if last:
                return

    def _exactly(self, items: Iterator[tuple[int, Entry]], n: int, first) -> Iterator[tuple[int, Entry]]:
        """The ``n`` files of ``items``, the first of them at mark ``first``; fewer or more, or
        another first file, is a tree that changed since it was listed to plan the run."""
        got = 0
        for item in items:
            if got == n or (got == 0 and first is not None and (item[0], item[1].rel) != first):
                break
            yield item
            got += 1  # noqa: SIM113 - counted across the loop's exits
        else:
            if got == n:
                return
        where = os.path.join(self.specs[first[0]].name, *first[1]) if first is not None else self.specs[0].name
        raise InputError(
            f"{where}: the files listed from here are not those listed when the run was planned (expected {n} "
            "before the next shard's first file): the tree changed while it was read",
            hint="run again once nothing adds or removes files in it",
        )

    def progress_done(self) -> int:
        return self._done

    def memory_bytes(self) -> int | None:
        """The rows' bytes in memory, roughly (shuffle buckets are sized from it): each file's
        bytes or decoded row, its path and offsets; counted from the listing (main process only)."""
        files = size = 0
        for s in self.specs:
            files += int(s.notes.get("files", 1)) if isinstance(s, TreeSpec) else 1
            size += s.size or 0
        per = 96 + (self.decoder.shape[0] * self.decoder.shape[1] * self.decoder.shape[2]
                    if isinstance(self.decoder, ImageDecoder) else 0)  # fmt: skip
        payload = size * (4 if isinstance(self.decoder, AudioDecoder) else 1)
        return files * per + (payload if not isinstance(self.decoder, ImageDecoder) else 0)

    # -- reading ------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._done = 0
        self.skipped = Skipped()

    def _read(self, item: tuple[int, Entry]) -> bytes:
        """The bytes of a file (at most the limit: a file that grew is caught too)."""
        i, e = item
        if e.size > self.file_limit:
            raise self._too_large(item, None)
        try:
            with open(e.path, "rb") as f:
                # the size listed, then whatever the file grew by (up to the limit): asking for the
                # limit at once would allocate it, per file (2.5x the time of a 100 KB read)
                data = f.read(e.size + 1)
                if len(data) > e.size:  # it grew since the listing
                    data += f.read(self.file_limit + 1 - len(data))
                    if len(data) > self.file_limit:
                        raise self._too_large(item, None, max(os.fstat(f.fileno()).st_size, len(data)))
        except OSError as err:
            raise BadFile(f"cannot be read ({err.strerror or err})", kind="read") from None
        return data

    def _too_large(self, item: tuple[int, Entry], e: TooLarge | None, size: int | None = None) -> InputError:
        """The error of a file over its share of the budget: its ``size`` (None: as listed), or
        what decoding it takes (``e``)."""
        from ..util import format_size

        if e is None:
            size = item[1].size if size is None else size
            what, need, share = f"{format_size(size)}", size, 16
        else:
            what, need, share = f"decodes {e} to {format_size(e.need)}", e.need, 8
        return InputError(
            f"{self._name(item)}: {what}, more than the {format_size(self.file_limit * 16 // share)} one file "
            f"may take under --max-memory {format_size(self.budget)} (1/{share} of it)",
            hint=f"raise --max-memory to {format_size(need * share)} or more",
        )

    def _load(self, item: tuple[int, Entry]):
        """What a file gives (run on the pool): its bytes or decoded value, or a BadFile."""
        try:
            data = self._read(item)
            if self.decoder is None:
                return data
            return self.decoder(data)
        except BadFile as e:
            return e
        except ModeChange as e:
            return InputError(f"{self._name(item)}: {e}", hint=MODE_HINT)
        except TooLarge as e:
            return self._too_large(item, e)

    def _read_items(self, items: Iterator[tuple[int, Entry]]) -> Iterator[Batch]:
        pool, threads = thread_pool(self.options.threads and self.read_files)
        try:
            window = self._window()
            pending: list[tuple[int, Entry]] = []
            for item in items:
                pending.append(item)
                if len(pending) >= window:
                    yield from self._window_batches(pending, pool, threads)
                    pending = []
            if pending:
                yield from self._window_batches(pending, pool, threads)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _window(self) -> int:
        """Files listed ahead and joined with one lookup of the sidecar: a batch's worth when the
        sidecar is held whole (or there is none), else as many as a quarter of the budget holds (a
        listed file and its sidecar row, ~512 bytes), each window costing a pass over the sidecar."""
        if self.sidecar is None or self.sidecar.whole:
            return BATCH_FILES
        return max(1024, self.budget // 4 // 512)

    def _window_batches(self, window: list[tuple[int, Entry]], pool, threads: int) -> Iterator[Batch]:
        from .filemeta import candidates

        lookup = None
        keys: list[tuple[str, ...]] = []
        if self.sidecar is not None and self._uses_sidecar():
            keys = [candidates(e.relpath) for _, e in window]
            wanted = None if self.sidecar.whole else {k for ks in keys for k in ks}
            lookup = self.sidecar.lookup(wanted)
        rows_of = None
        if lookup is not None:
            rows_of = [lookup.find(k, _other_file(e), self._name(it)) for k, it in zip(keys, window, strict=True)
                       for e in (it[1],)]  # fmt: skip
        loaded = self._loads(window, pool, threads)
        held: list = []
        held_bytes = 0
        for k, item in enumerate(window):
            value = next(loaded) if self.read_files else None
            reason = None
            if isinstance(value, InputError):
                raise value
            if isinstance(value, BadFile):
                reason = (value.kind, str(value))
            elif rows_of is not None and rows_of[k] < 0:
                reason = ("metadata", f"no row in --metadata {self.fo.metadata} (looked up as {', '.join(keys[k])})")
            if reason is None:
                try:
                    item[1].relpath.encode("utf-8")
                except UnicodeEncodeError:
                    reason = ("name", "its name is not valid UTF-8")
            self._done += item[1].size
            if reason is not None:
                self._bad(item, *reason)
                continue
            held.append((item, value, rows_of[k] if rows_of is not None else -1))
            held_bytes += self._cost(item, value)
            if held_bytes >= self.options.batch_bytes or len(held) >= BATCH_FILES:
                yield self._batch(held, lookup)
                held, held_bytes = [], 0
        if held:
            yield self._batch(held, lookup)

    def _uses_sidecar(self) -> bool:
        return self.wanted is None or any(n in self.wanted for n in self.sidecar.schema.names)

    def _cost(self, item, value) -> int:
        if value is None:
            return 64 + len(item[1].relpath)
        return int(getattr(value, "nbytes", None) or len(value)) + 64

    def _loads(self, window: list[tuple[int, Entry]], pool, threads: int) -> Iterator:
        """Each file's bytes or decoded value, in order; on the pool, at most ``2 * threads`` ahead."""
        return ordered_map(pool, self._load, window, 2 * threads) if self.read_files else iter(())

    def _bad(self, item: tuple[int, Entry], kind: str, reason: str) -> None:
        name = self._name(item)
        if self.fo.on_bad_file != "skip":
            hint = "fix or remove it, or pass --on-bad-file skip to leave such files out (counted)"
            raise InputError(f"{name}: {reason}", hint=hint)
        self.skipped.add(name, kind, reason)

    def _batch(self, held: list, lookup) -> Batch:
        n = len(held)
        cols: dict = {}
        paths = [item[1].relpath.encode("utf-8") for item, _, _ in held]
        cols["path"] = VarColumn.from_pylist(paths, np.uint8)
        if self.read_files:
            values = [v for _, v, _ in held]
            if self.payload == "bytes":
                cols["bytes"] = VarColumn.from_pylist(values, np.uint8)
            elif self.payload == "image":
                cols["image"] = np.stack(values)
            else:
                lens = np.fromiter((len(v) for v in values), dtype=np.int64, count=n)
                offs = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(lens, out=offs[1:])
                cols["audio"] = VarColumn(np.concatenate(values).astype(np.float32, copy=False), offs)
        if self.classes:
            cols["label"] = np.fromiter(
                (self.class_index[e.rel[0]] if len(e.rel) > 1 else -1 for (_, e), _, _ in held), dtype=np.int64, count=n
            )
        if lookup is not None and lookup.rows is not None:
            sub = lookup.rows.take(np.fromiter((r for _, _, r in held), dtype=np.int64, count=n))
            cols.update(sub.columns)
        names = self.schema.names
        return Batch({c: cols[c] for c in names}, n)

    # -- what the manifest records ------------------------------------------------------------

    def report(self) -> dict:
        return {"skipped_files": self.skipped.to_dict()} if self.skipped.count else {}

    def merge_reports(self, reports: list[dict]) -> None:
        self._reset()
        for r in reports:
            self.skipped.merge((r or {}).get("skipped_files") or {})

    def manifest_extra(self) -> dict:
        out: dict = {}
        names = self.schema.names
        if "label" in names:
            out["labels"] = {"column": "label", "names": list(self.classes), "from": "top-level folder"}
            if self.empty_classes:
                empty = ", ".join(f"'{c}' (label {self.class_index[c]})" for c in self.empty_classes)
                out["notes"] = [
                    f"class folders without a file keep their labels (so that splits agree), with no rows: {empty}"
                ]
        if self.decoder is not None and self.payload in names:
            out["decode"] = {"column": self.payload, **self.decoder.describe()}
        if self.fo.on_bad_file == "skip":
            out["skipped_files"] = self.skipped.to_dict()
            out["notes"] = out.get("notes", []) + self.skipped.note()
        return out


def _other_file(e: Entry):
    """``taken(key)`` for the sidecar lookup of ``e``: is ``key`` the relative path of another file
    under ``e``'s root (that file's row, not a shorter key of ``e``'s)?"""
    root = e.path[: len(e.path) - len(os.sep.join(e.rel))]
    return lambda key: key != e.relpath and os.path.isfile(os.path.join(root, *key.split("/")))
