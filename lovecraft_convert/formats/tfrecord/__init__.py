"""TFRecord: one ``tf.train.Example`` per row, framed with CRC32C (optionally GZIP-compressed).

Encoded by us (:mod:`.example`, :mod:`.framing`), so writing never needs TensorFlow; read back by
tf.data with the manifest's feature spec (:mod:`.tfdata`) or by our NumPy decoder (:mod:`.reader`).

Layout (the four parts, :mod:`lovecraft_convert.formats.protocols`): writes: :mod:`.writer`
(``TfrecordWriter``; :mod:`.example` encodes rows, :mod:`.framing` and :mod:`.crcspan` frame them,
:mod:`.blocks` indexes them); reads: :mod:`.reader` and :mod:`.decode` / :mod:`.columnar` (NumPy),
:mod:`.tfdata` (tf.data); checks: :mod:`.check` (every record's CRCs, then its Example); describes:
this module and :mod:`.rawfile` (any TFRecord file, not only ours).
"""

from __future__ import annotations

import os

from ...manifest import BOOL, COUNT, POSITIVE, STR, ListOf, MapOf, Null, Obj, OneOf, Pair
from ..base import OutputFormat
from ..describing import py_str

FEATURE = Obj(
    {"type": OneOf("FixedLenFeature", "VarLenFeature"), "dtype": OneOf("float32", "int64", "string")},
    {"shape": ListOf(COUNT), "encoding": OneOf("float64le"), "ragged": BOOL, "value_shape": ListOf(COUNT)},
)
SECTION = Obj(
    {"feature_spec": MapOf(FEATURE)},
    {
        "compression": Null(OneOf("GZIP")),  # what tf.data's TFRecordDataset is given
        "blocks": MapOf(Obj({"records": POSITIVE, "bytes": ListOf(Pair(COUNT, COUNT))})),
    },
)


class TfrecordFormat(OutputFormat):
    name = "tfrecord"
    title = "one tf.train.Example per row (TFRecord), read with tf.data"
    extensions = (".tfrecord", ".tfrecord.gz")
    compressions = ("gzip",)
    variable_as_objects = True
    manifest_keys = ("tfrecord",)
    manifest_spec = Obj(
        {"tfrecord": SECTION}, {"buckets": ListOf(Obj({}, {"feature_spec": MapOf(FEATURE), "name": STR}))}
    )

    def writer_class(self):
        from .writer import TfrecordWriter

        return TfrecordWriter

    def size_linear(self, compression):
        return compression is None

    def dataset_extra(self, schema, unit_extras):
        from .example import feature_spec

        info = dict((unit_extras[0] if unit_extras else {}).get("tfrecord") or {})
        info["feature_spec"] = feature_spec(schema)
        blocks = {}
        for extra in unit_extras:  # every unit's files (their blocks, see .blocks)
            blocks.update((extra.get("tfrecord") or {}).get("blocks") or {})
        if blocks:
            info["blocks"] = dict(sorted(blocks.items()))
        return {"tfrecord": info}

    def bucket_extra(self, unit_extra):
        return {"feature_spec": unit_extra["tfrecord"]["feature_spec"]}

    def manifest_problems(self, manifest):
        from .check import manifest_problems

        return manifest_problems(manifest)

    def most_rows(self, sizes, entries, schema, manifest):
        from .check import most_records

        return most_records(sizes, entries, manifest)

    def count_problem(self, sizes, entries, rows, schema, manifest):
        """Also each file's block index against its size and rows (the reader would make one
        offset per block it lists)."""
        why = super().count_problem(sizes, entries, rows, schema, manifest)
        if why is not None:
            return why
        from .blocks import blocks_problem

        info = manifest.get("tfrecord") if isinstance(manifest.get("tfrecord"), dict) else {}
        blocks = info.get("blocks") if isinstance(info.get("blocks"), dict) else {}
        mine = [(size, e) for size, e in zip(sizes, entries, strict=True) if e.get("path") in blocks]
        if len(mine) == 1 and len(entries) == 1:
            size, e = mine[0]
            why = blocks_problem(blocks[e["path"]], rows, size)
            return None if why is None else f"file {e['path']}: {why}"
        return None

    def storage_dtype(self, field, manifest=None):
        from .example import storage_dtype

        return storage_dtype(field)

    def open_part(self, files, manifest, shared):
        from .reader import TfrecordReader

        path = self.unit_file(files.paths, f"shard {files.key[1]}")
        info = manifest.get("tfrecord") or {}
        rel = {p: e.get("path") for p, e in zip(files.paths, files.entries, strict=True)}.get(path)
        blocks = info.get("blocks") if isinstance(info.get("blocks"), dict) else {}
        return TfrecordReader(files.rows, files.schema, path, info.get("compression"), blocks=blocks.get(rel))

    def tf_dataset(self, ds, plan, input_context, start=(0, 0)):
        if getattr(ds, "remote", None) is not None:  # tf.data cannot read through the node's cache
            return None
        from .tfdata import tfrecord_dataset

        return tfrecord_dataset(ds, plan, input_context, start)

    def check_unit(self, ctx, unit, schema):
        from .check import check_unit

        return check_unit(ctx, unit, schema, self.checked_unit_file(unit))

    def load_snippets(self, path, manifest):
        tf_info = manifest.get("tfrecord") or {}
        spec = tf_info.get("feature_spec") or {}
        comp = tf_info.get("compression")
        lines = ["import tensorflow as tf", "", "feature_spec = {"]
        f64 = {n: s for n, s in spec.items() if s.get("encoding") == "float64le"}
        for name, s in spec.items():
            dtype = f"tf.{s.get('dtype')}"
            if s.get("type") == "VarLenFeature":
                lines.append(f"    {py_str(name)}: tf.io.VarLenFeature({dtype}),")
            else:
                lines.append(f"    {py_str(name)}: tf.io.FixedLenFeature({list(s.get('shape') or [])}, {dtype}),")
        lines.append("}")
        files = [f for f in manifest.get("files") or [] if isinstance(f, dict)]
        lines.append(f"files = {[os.path.join(path, x['path']) for x in files]!r}")
        lines.append(
            f"ds = tf.data.TFRecordDataset(files, compression_type={py_str(comp) if comp else 'None'})"
            ".batch(256).map(lambda r: tf.io.parse_example(r, feature_spec))"
        )
        for name, s in f64.items():  # float64 kept exact: little-endian bytes, one string per row
            if s.get("ragged"):
                lines.append(f"# {name}: row i is tf.io.decode_raw(batch[{py_str(name)}][i], tf.float64)")
            else:
                shape = [-1, *s.get("value_shape", [])]
                lines.append(f"# {name}: tf.reshape(tf.io.decode_raw(batch[{py_str(name)}], tf.float64), {shape})")
        return {"tf.data": "\n".join(lines)}

    def claims_file(self, path):
        from .rawfile import is_tfrecord

        return is_tfrecord(path)

    def inspect_files(self, paths, *, sample, max_expansion):
        from .rawfile import inspect_tfrecord

        return inspect_tfrecord(paths, sample=sample, max_expansion=max_expansion)

    def format_file_report(self, report):
        from .rawfile import format_report

        return format_report(report)


FORMAT = TfrecordFormat()
