"""WebDataset input (``.tar`` shards, also gzip/zstd-compressed): tar members grouped by key into
samples, one row each, as WebDataset itself groups them.

A member ``dir/000123.seg.png`` has the key ``dir/000123`` (the path up to the first dot of its
last component) and the extension ``seg.png`` (lower-cased); consecutive members with one key are
one sample. Columns: ``__key__`` (text) and one column per extension, the member's bytes as they
came (``--decode image`` turns the image extensions' columns into ``uint8[H, W, C]``, ``--decode
audio`` the audio ones into float32 samples, under the same names; see :mod:`.filedecode`).

The extensions are those of the first :data:`PROBE` samples of the first shard, in the order met,
or exactly the ones ``--columns`` names (members of other extensions are then left out). A later
sample with an extension outside them is one line naming it; a sample without one of them gets
empty bytes there (counted: ``missing_members`` in the manifest). Directories and members that
are not regular files, and members without an extension, are left out, as WebDataset leaves
them. A member larger than a sixteenth of ``--max-memory`` is refused in one line. Each shard is a
part for ``shard`` workers, read as a stream (never extracted to disk). ``--metadata`` joins a
sidecar by key (then by its last component).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator

import numpy as np

from ..errors import InputError, OptionsError
from ..schema import BINARY, FIXED, SEQUENCE, STRING, Batch, Field, Schema, VarColumn
from .base import Part, Reader, ReadOptions
from .filedecode import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
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
from .sources import InputSpec
from .streams import open_stream

PROBE = 64  # samples of the first shard whose extensions make the columns
BATCH_SAMPLES = 4096
KEY = "__key__"


def split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) of a member name, or None when its last component has no dot."""
    head, _, last = name.rpartition("/")
    stem, dot, ext = last.partition(".")
    if not dot or not stem:
        return None
    return (f"{head}/{stem}" if head else stem), ext.lower()


class WebDatasetReader(Reader):
    takes_column_types = True  # the sidecar's columns
    skipped_noun = "sample"  # what --on-bad-file skip leaves out (Reader.nothing_read)
    takes_file_options = True

    def __init__(self, specs: list[InputSpec], options: ReadOptions) -> None:
        super().__init__(specs, options)
        self.fo = FileOptions.from_dict(options.files)
        self.budget = options.batch_bytes * 16
        self.member_limit = options.batch_bytes
        self.decoded_limit = 2 * options.batch_bytes
        self._reset()
        for s in specs:
            if s.is_stdin or s.is_dir:
                raise InputError(f"{s.name}: a webdataset input is .tar files", hint="pass them, e.g. 'shards/*.tar'")
        want = list(dict.fromkeys(options.columns)) if options.columns else None
        if want is not None:
            exts = [c for c in want if c != KEY and c not in self._sidecar_names(options)]
        else:
            exts = self._probe_extensions()
        if not exts:
            raise InputError(
                f"{specs[0].name}: no member with an extension in its first samples", hint="check the file"
            )
        self.exts = exts
        self.decoders = self._decoders()
        self.sidecar = None
        if self.fo.metadata is not None:
            from .filemeta import Sidecar

            self.sidecar = Sidecar(self.fo.metadata, self.budget, options.column_types, options.errors, [KEY, *exts])
            if self.sidecar.size > self.budget // 16:
                raise InputError(
                    f"--metadata {self.fo.metadata}: {self.sidecar.size} bytes, more than a webdataset input "
                    f"joins in memory (1/16 of --max-memory)",
                    hint="raise --max-memory",
                )
        if options.column_types:
            from .filemeta import check_column_types

            names = ", ".join(s.name for s in specs)
            check_column_types(options.column_types, [KEY, *exts], self.sidecar, "webdataset", names)
        self.widens = self.sidecar is not None  # the sidecar's CSV or JSON Lines types
        self.wanted = want
        self._reset()

    @staticmethod
    def _sidecar_names(options: ReadOptions) -> set[str]:
        meta = (options.files or {}).get("metadata")
        if not meta:
            return set()
        from .filemeta import Sidecar

        return set(Sidecar(meta, options.batch_bytes * 16, options.column_types, options.errors, []).schema.names)

    def _probe_extensions(self) -> list[str]:
        seen: dict[str, None] = {}
        for n, (_key, members, _where) in enumerate(self._samples(0)):
            for ext in members:
                seen.setdefault(ext, None)
            if n + 1 >= PROBE:
                break
        return list(seen)

    def _decoders(self) -> dict:
        """The decoder of each decoded extension's column (the first such member gives what the
        flags leave open)."""
        fo = self.fo
        if fo.decode is None:
            return {}
        kinds = IMAGE_EXTENSIONS if fo.decode == "image" else AUDIO_EXTENSIONS
        chosen = [e for e in self.exts if "." + e.rsplit(".", 1)[-1] in kinds]
        if not chosen:
            raise InputError(
                f"{self.specs[0].name}: no {fo.decode} member among the extensions {', '.join(self.exts)}",
                hint=f"--decode {fo.decode} decodes members named {', '.join(k[1:] for k in kinds)}",
            )
        if fo.decode == "image":
            from ..errors import need

            need("PIL.Image", "--decode image", "pip install 'lovecraft-convert[images]'")
            size, mode = fo.image_size, fo.image_mode
            first = None
            if size is None or mode is None:
                got = self._probe(chosen, lambda data: probe_image(data, self.decoded_limit), "image", "shape")
                if got is not None:
                    first = None if mode else got[1]
                    size, mode = size or got[0], mode or mode_for(got[1])
            dec = ImageDecoder(size, mode, fo.resize if fo.image_size else None, self.decoded_limit, first)
        else:
            rate = fo.sample_rate
            if rate is None:
                rate = self._probe(chosen, probe_audio, "clip", "rate")
            dec = AudioDecoder(rate, self.decoded_limit)
        return {e: dec for e in chosen}

    def _probe(self, chosen: list[str], probe, noun: str, what: str):
        """What the first member that decodes gives (the shape or rate the flags leave open): the
        first sample's member, or with --on-bad-file skip the first of a hundred that decodes, as
        the files input does (None when no sample holds one)."""
        tries = 100 if self.fo.on_bad_file == "skip" else 1
        seen = 0
        for key, members, where in self._samples(0):
            hit = next((e for e in chosen if e in members), None)
            if hit is None:
                continue
            seen += 1
            try:
                return probe(members[hit])
            except (BadFile, TooLarge) as e:
                if seen >= tries or isinstance(e, TooLarge):
                    hint = f"the first {noun} gives the {what}: fix or remove it" + (
                        "" if tries > 1 else ", or pass --on-bad-file skip to leave such samples out (counted)"
                    )
                    raise InputError(f"{where}, member {key}.{hit}: {e}", hint=hint) from None
        return None

    @property
    def schema(self) -> Schema:
        fs = [Field(KEY, STRING, "|u1")]
        for e in self.exts:
            dec = self.decoders.get(e)
            if dec is None:
                fs.append(Field(e, BINARY, "|u1"))
            elif isinstance(dec, ImageDecoder):
                fs.append(Field(e, FIXED, "|u1", dec.shape))
            else:
                fs.append(Field(e, SEQUENCE, "<f4"))
        if self.sidecar is not None:
            fs += list(self.sidecar.schema)
        if self.wanted:
            by = {f.name: f for f in fs}
            missing = [c for c in self.wanted if c not in by]
            if missing:
                raise OptionsError(f"--columns: no column '{missing[0]}'", hint=f"columns are {', '.join(by)}")
            fs = [by[c] for c in self.wanted]
        return Schema(tuple(fs))

    def widen(self, widened: dict[str, str]) -> None:
        if self.sidecar is not None:
            self.sidecar.widen(widened)

    # -- reading ------------------------------------------------------------------------------

    def _samples(self, i: int, stream=None) -> Iterator[tuple[str, dict[str, bytes], str]]:
        """(key, {extension: bytes}, shard name) of each sample of shard ``i``, streamed."""
        spec = self.specs[i]
        where = spec.name
        key, members = None, {}
        last = None
        with open_stream(spec, max_ratio=self.options.max_ratio) if stream is None else stream as raw:
            self._stream = raw
            try:
                tf = tarfile.open(fileobj=raw, mode="r|")  # noqa: SIM115 - the stream is closed by its own with
                for m in tf:
                    if not m.isfile():
                        continue
                    split = split_name(m.name)
                    if split is None:
                        continue
                    k, ext = split
                    if m.size > self.member_limit:
                        raise self._too_large(f"{where}, member {m.name}", m.size)
                    f = tf.extractfile(m)
                    data = f.read() if f is not None else b""
                    if k != key:
                        if key is not None:
                            yield key, members, where
                        key, members = k, {}
                    if ext in members:
                        raise InputError(
                            f"{where}, member {m.name}: a second .{ext} member of sample '{k}'",
                            hint="give each member of a sample its own extension",
                        )
                    members[ext] = data
                    last = m.name
            except (tarfile.TarError, EOFError) as e:
                after = f" after member {last}" if last else ""
                raise InputError(f"{where}: not a readable tar{after} ({e})", hint="re-create the shard") from None
            if key is not None:
                yield key, members, where
            self._base += raw.raw_count()

    def _too_large(self, what: str, size: int) -> InputError:
        from ..util import format_size

        return InputError(
            f"{what}: {format_size(size)}, more than the {format_size(self.member_limit)} one member may take "
            f"under --max-memory {format_size(self.budget)} (1/16 of it)",
            hint=f"raise --max-memory to {format_size(size * 16)} or more",
        )

    def progress_done(self) -> int:
        s = self._stream
        return self._base + (s.raw_count() if s is not None and not s.closed else 0)

    def batches(self) -> Iterator[Batch]:
        self._reset()
        rows = 0
        for i in range(len(self.specs)):
            for batch in self._shard_batches(i):
                rows += batch.num_rows
                yield batch
        if rows == 0 and not self.skipped.count:
            raise InputError(f"{', '.join(s.name for s in self.specs)}: holds no samples", hint="check the file")

    def partitions(self, target_bytes: int, mapper=None) -> list[Part]:
        return [Part(i, i) for i in range(len(self.specs))]

    def part_batches(self, part: Part) -> Iterator[Batch]:
        self._reset()
        yield from self._shard_batches(part.spec)

    def _reset(self) -> None:
        self._base = 0
        self._stream = None
        self.skipped = Skipped()
        self.missing: dict[str, int] = {}

    def _decode(self, sample: tuple[str, dict[str, bytes], str]):
        """(key, shard, the sample's row values or (name, kind, reason) of a bad sample); on the pool."""
        key, members, where = sample
        return key, where, self._values(key, members, where)

    def _values(self, key: str, members: dict[str, bytes], where: str):
        out: dict[str, object] = {}
        for e in self.exts:
            data = members.get(e)
            dec = self.decoders.get(e)
            if dec is None:
                out[e] = data
                continue
            if data is None:
                return (f"{where}, sample {key}", "missing", f"no .{e} member to decode")
            try:
                out[e] = dec(data)
            except BadFile as err:
                return (f"{where}, member {key}.{e}", err.kind, str(err))
            except ModeChange as err:
                raise InputError(f"{where}, member {key}.{e}: {err}", hint=MODE_HINT) from None
            except TooLarge as err:
                raise InputError(
                    f"{where}, member {key}.{e}: decodes {err} to {err.need} bytes, more than an item may take "
                    f"under --max-memory (1/8 of it)",
                    hint=f"raise --max-memory to {err.need * 8} bytes or more",
                ) from None
        return out

    def _shard_batches(self, i: int) -> Iterator[Batch]:
        pool, threads = thread_pool(self.options.threads and bool(self.decoders))
        lookup = self.sidecar.lookup(None) if self.sidecar is not None else None
        try:
            held: list = []
            held_bytes = 0
            samples = self._checked(self._samples(i))
            for key, where, row in ordered_map(pool, self._decode, samples, 2 * threads):
                if isinstance(row, tuple):
                    name, kind, reason = row
                    self._bad(name, kind, reason)
                    continue
                r = -1
                if lookup is not None:
                    from .filemeta import candidates

                    r = lookup.find(candidates(key))
                    if r < 0:
                        self._bad(f"{where}, sample {key}", "metadata", f"no row in --metadata {self.fo.metadata}")
                        continue
                held.append((key, row, r))
                held_bytes += 64 + sum(getattr(v, "nbytes", None) or len(v or b"") for v in row.values())
                if held_bytes >= self.options.batch_bytes or len(held) >= BATCH_SAMPLES:
                    yield self._batch(held, lookup)
                    held, held_bytes = [], 0
            if held:
                yield self._batch(held, lookup)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def _checked(self, samples):
        """Samples with their extensions checked against the columns (a new one is one line)."""
        known = set(self.exts)
        for sample in samples:
            key, members, where = sample
            extra = [e for e in members if e not in known]
            if extra and not self.wanted:
                raise InputError(
                    f"{where}, sample {key}: a .{extra[0]} member, an extension the first {PROBE} samples do not have",
                    hint=f"name the columns with --columns {KEY},{','.join(self.exts)},... "
                    "(members of other extensions are then left out)",
                )
            for e in self.exts:
                if e not in members and e not in self.decoders:
                    self.missing[e] = self.missing.get(e, 0) + 1
            yield sample

    def _bad(self, name: str, kind: str, reason: str) -> None:
        if self.fo.on_bad_file != "skip":
            raise InputError(
                f"{name}: {reason}",
                hint="fix or remove it, or pass --on-bad-file skip to leave such samples out (counted)",
            )
        self.skipped.add(name, kind, reason)

    def _batch(self, held: list, lookup) -> Batch:
        n = len(held)
        cols: dict = {KEY: VarColumn.from_pylist([k.encode("utf-8", "surrogateescape") for k, _, _ in held], np.uint8)}
        for e in self.exts:
            dec = self.decoders.get(e)
            values = [row[e] for _, row, _ in held]
            if dec is None:
                cols[e] = VarColumn.from_pylist([v or b"" for v in values], np.uint8)
            elif isinstance(dec, ImageDecoder):
                cols[e] = np.stack(values)
            else:
                lens = np.fromiter((len(v) for v in values), dtype=np.int64, count=n)
                offs = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(lens, out=offs[1:])
                cols[e] = VarColumn(np.concatenate(values).astype(np.float32, copy=False), offs)
        if lookup is not None and lookup.rows is not None:
            sub = lookup.rows.take(np.fromiter((r for _, _, r in held), dtype=np.int64, count=n))
            cols.update(sub.columns)
        return Batch({c: cols[c] for c in self.schema.names}, n)

    # -- what the manifest records ------------------------------------------------------------

    def report(self) -> dict:
        out: dict = {}
        if self.skipped.count:
            out["skipped_files"] = self.skipped.to_dict()
        if self.missing:
            out["missing_members"] = dict(self.missing)
        return out

    def merge_reports(self, reports: list[dict]) -> None:
        self._reset()
        for r in reports:
            self.skipped.merge((r or {}).get("skipped_files") or {})
            for e, n in ((r or {}).get("missing_members") or {}).items():
                self.missing[e] = self.missing.get(e, 0) + n

    def manifest_extra(self) -> dict:
        out: dict = {}
        names = self.schema.names
        decoded = [e for e in self.decoders if e in names]
        if decoded:
            out["decode"] = {"columns": decoded, **self.decoders[decoded[0]].describe()}
        if self.missing:
            out["missing_members"] = dict(self.missing)
        if self.fo.on_bad_file == "skip":
            out["skipped_files"] = self.skipped.to_dict()
            out["notes"] = self.skipped.note(self.skipped_noun)
        return out
