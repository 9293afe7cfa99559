"""``verify`` of a TFRecord dataset's unit: every record's framing and both CRCs, and every
``tf.train.Example`` decoded against the schema (exactly its features, of the right kind and
count), and the manifest's block index (:mod:`.blocks`) against the offsets the file's records
have. Gzip files are decompressed in bounded pieces, and a stream inflating beyond 1000x its size
is refused."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator

import numpy as np

from ...errors import DatasetError, LovecraftError
from ...schema import FIXED, Batch, Schema
from ..base import CheckContext, FileProblem, Unit, short
from .blocks import decode_blocks, scan_index
from .decode import decode_records
from .framing import iter_records
from .reader import TfrecordReader

GZIP_MAX_RATIO = 1032  # deflate never inflates more than this (258 bytes from 2 bits)
MIN_RECORD = 16  # a record's framing: its length, and a CRC of it and of its data
MIN_MEMBER = 18  # a gzip member's header and trailer


def manifest_problems(m: dict) -> list[str]:
    """What in the ``tfrecord`` section contradicts the rest of the manifest: the feature spec
    tf.data parses with against the schema (the records are decoded against the schema), each
    bucket's against the columns its files hold (padded buckets: dense rows of its width)."""
    from ...manifest import schema_of
    from ...schema import FIXED, SEQUENCE, Field, Schema
    from .example import feature_spec

    try:
        schema = schema_of(m, "")
    except DatasetError:
        return []  # reported as the schema's problem
    info = m.get("tfrecord") if isinstance(m.get("tfrecord"), dict) else {}
    out = _spec_differences("tfrecord.feature_spec", info.get("feature_spec"), feature_spec(schema))
    for i, b in enumerate(m.get("buckets") or []):
        if not isinstance(b, dict) or "feature_spec" not in b:
            continue
        if b.get("layout", "padded") == "padded" and isinstance(b.get("max_length"), int):
            w = int(b["max_length"])
            schema_b = Schema(tuple(Field(f.name, FIXED, f.dtype, (w,)) if f.kind == SEQUENCE else f for f in schema))
        else:
            schema_b = schema
        out += _spec_differences(f"buckets[{i}].feature_spec", b["feature_spec"], feature_spec(schema_b))
    return out


def _spec_differences(where: str, got, want: dict) -> list[str]:
    if not isinstance(got, dict):
        return [f"{where} is missing"]
    out = []
    for name in set(want) | set(got):
        g, w = got.get(name), want.get(name)
        if g == w:
            continue
        if w is None:
            out.append(f"{where}[{json.dumps(name)}] names no column of the schema")
        elif g is None:
            out.append(f"{where} has no feature for column '{name}'")
        else:
            key = next(
                k for k in ("type", "dtype", "shape", "encoding", "ragged", "value_shape") if g.get(k) != w.get(k)
            )
            out.append(
                f"{where}[{json.dumps(name)}].{key} is {json.dumps(g.get(key))}; the schema (and the records, "
                f"which verify decodes against it) say {json.dumps(w.get(key))}"
            )
    return sorted(out)


def most_records(sizes: list[int], entries: list[dict], m: dict) -> int:
    """The most records files of ``sizes`` bytes can hold: a record takes at least 16 bytes; in a
    gzip file those are inflated at most 1032-fold, and with a block index at most ``N`` records
    per gzip member of at least 18 bytes."""
    info = m.get("tfrecord") if isinstance(m.get("tfrecord"), dict) else {}
    blocks = info.get("blocks") if isinstance(info.get("blocks"), dict) else {}
    total = 0
    for size, e in zip(sizes, entries, strict=True):
        path = str(e.get("path", ""))
        if not (info.get("compression") == "GZIP" or path.endswith(".gz")):
            total += size // MIN_RECORD
            continue
        most = size * GZIP_MAX_RATIO // MIN_RECORD
        idx = blocks.get(path)
        if isinstance(idx, dict) and isinstance(idx.get("records"), int):
            most = min(most, idx["records"] * max(1, size // MIN_MEMBER))
        total += most
    return total


def is_gzip(ctx: CheckContext, path: str) -> bool:
    info = ctx.manifest.get("tfrecord")
    comp = info.get("compression") if isinstance(info, dict) else None
    return (comp.upper() == "GZIP" if isinstance(comp, str) else False) or path.endswith(".gz")


def check_compression(ctx: CheckContext, p: str) -> None:
    """The manifest's ``tfrecord.compression`` is what the file is (tf.data reads it so): GZIP
    exactly when the file is gzip (its first bytes), and the file's name says the same."""
    info = ctx.manifest.get("tfrecord") if isinstance(ctx.manifest.get("tfrecord"), dict) else {}
    said = info.get("compression")
    with open(ctx.full(p), "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if gz != (said == "GZIP"):
        what = "gzip" if gz else "not compressed"
        raise FileProblem(p, f"is {what}; the manifest's tfrecord.compression is {said!r}", "manifest")
    if gz != p.endswith(".gz"):
        raise FileProblem(p, f"is {'gzip' if gz else 'not compressed'}, its name says otherwise", "manifest")


def check_unit(ctx: CheckContext, unit: Unit, schema: Schema, p: str) -> Iterator[tuple[Batch, str]]:
    try:
        check_compression(ctx, p)
    except OSError as e:
        raise FileProblem(p, f"cannot be read ({short(e)})") from None
    gz = is_gzip(ctx, p)
    step = ctx.step_rows(schema)
    if all(f.kind == FIXED for f in schema):
        batches = _fixed(ctx, unit, schema, p, gz, step)
    else:
        batches = _rows(ctx, unit, schema, p, gz, step)
    for b in batches:
        yield b, p
    check_index(ctx, unit, p, gz)


def check_index(ctx: CheckContext, unit: Unit, p: str, gz: bool) -> None:
    """The manifest's block index of the file (datasets written before it have none) lists where
    its blocks start, as computed from the file itself."""
    info = ctx.manifest.get("tfrecord") if isinstance(ctx.manifest.get("tfrecord"), dict) else {}
    blocks = info.get("blocks")
    if blocks is None:
        return
    if not isinstance(blocks, dict) or p not in blocks:
        raise FileProblem(p, "the manifest's tfrecord.blocks has no entry for the file", "manifest")
    try:
        n, offsets = decode_blocks(blocks[p], unit.rows, os.path.getsize(ctx.full(p)), p)
    except DatasetError as e:
        raise FileProblem.of(p, e, "manifest") from None
    try:
        actual = scan_index(ctx.full(p), gz, n)
    except OSError as e:
        raise FileProblem(p, f"cannot be read ({short(e)})") from None
    if actual is None:
        raise FileProblem(p, f"not written in blocks of {n} records (gzip members) as the manifest says")
    if not np.array_equal(actual, offsets):
        k = int(np.flatnonzero(actual != offsets)[0]) if len(actual) == len(offsets) else min(len(actual), len(offsets))
        raise FileProblem(p, f"block {k} starts at byte {_at(actual, k)}, the manifest's index says {_at(offsets, k)}")


def _at(a: np.ndarray, i: int) -> str:
    return str(int(a[i])) if i < len(a) else "nothing"


def _fixed(ctx: CheckContext, unit: Unit, schema: Schema, p: str, gz: bool, step: int) -> Iterator[Batch]:
    """Fixed-shape numeric rows: the dataset reader's vectorised path (both CRCs of every record)."""
    reader = TfrecordReader(unit.rows, schema, ctx.full(p), "GZIP" if gz else None, strict=True)
    done = 0
    try:
        for b in reader.chunks(0, unit.rows + 1, step):
            done += b.num_rows
            yield b
    except LovecraftError as e:
        raise FileProblem.of(p, e) from None
    except (zlib.error, EOFError, OSError, ValueError) as e:
        raise FileProblem(p, f"cannot be decoded after record {done} ({short(e)})") from None


def _rows(ctx: CheckContext, unit: Unit, schema: Schema, p: str, gz: bool, step: int) -> Iterator[Batch]:
    """Any schema: every record framed with both CRCs checked, then decoded a batch at a time."""
    full = ctx.full(p)
    stream = _GzipLimit(full, p) if gz else open(full, "rb", buffering=1 << 20)  # noqa: SIM115 - closed below
    size = None if gz else os.path.getsize(full)
    records: list[bytes] = []
    index = 0
    try:
        with stream:
            for data in iter_records(stream, p, size):
                index += 1
                if index > unit.rows:
                    raise FileProblem(p, f"holds more than the {unit.rows} records the manifest says", "rows")
                records.append(data)
                if len(records) == step:
                    yield decode_records(records, schema, where=p, first=index - len(records) + 1, strict=True)
                    records = []
            if records:
                yield decode_records(records, schema, where=p, first=index - len(records) + 1, strict=True)
    except LovecraftError as e:
        raise FileProblem.of(p, e) from None
    except (EOFError, OSError, ValueError) as e:
        raise FileProblem(p, f"cannot be decoded after record {index} ({short(e)})") from None
    if index < unit.rows:
        raise FileProblem(p, f"holds {index} records, the manifest says {unit.rows}", "rows")


class _GzipLimit:
    """A gzip stream that refuses to inflate beyond a ratio of its compressed size (bombs)."""

    def __init__(self, path: str, name: str, max_ratio: float = 1000.0) -> None:
        self.raw = open(path, "rb")  # noqa: SIM115 - closed in __exit__
        self.size = os.path.getsize(path)
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.name = name
        self.out = 0
        self.max_ratio = max_ratio

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.gz.read(n)
        except EOFError:
            raise FileProblem(self.name, f"truncated gzip stream after {self.out} decompressed bytes") from None
        except (OSError, zlib.error, gzip.BadGzipFile) as e:
            raise FileProblem(
                self.name, f"corrupt gzip stream after {self.out} decompressed bytes ({short(e)})"
            ) from None
        self.out += len(data)
        if self.out > (64 << 20) and self.out > self.max_ratio * max(1, self.size):
            raise FileProblem(self.name, f"inflates more than {self.max_ratio:.0f}x its size (decompression bomb?)")
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.gz.close()
        self.raw.close()
