"""TFRecord datasets in tf.data, every column kind parsed by ``tf.io.parse_example`` with the
manifest's feature spec on whole batches (float64 from its bytes with ``tf.io.decode_raw``):

* read in order from the start: ``TFRecordDataset`` over the shards, one after the other (the
  order of ``batches()``). The file list is the pipeline's source, so tf.distribute's file-level
  auto-sharding splits the shards between workers;
* shuffled, or from a saved state: the records in the loader's own order (the same blocks,
  windows and positions as ``batches()``, a pure function of seed, epoch and reader), read
  undecoded by our reader (both CRCs checked) and handed to tf.data as batches of serialized
  records."""

from __future__ import annotations

import itertools
import os
import threading

import numpy as np

from ...errors import DatasetError
from ...schema import BINARY, SEQUENCE, STRING
from .example import F64


def to_tf_feature_spec(spec: dict[str, dict]) -> dict:
    """The manifest's JSON feature spec as ``tf.io`` features."""
    import tensorflow as tf

    out = {}
    for name, s in spec.items():
        dtype = getattr(tf, s["dtype"])
        if s["type"] == "VarLenFeature":
            out[name] = tf.io.VarLenFeature(dtype)
        else:
            out[name] = tf.io.FixedLenFeature(s["shape"], dtype)
    return out


def decode_float64(tf, v, s: dict):
    """A ``float64le`` bytes feature (one string per row) as float64 values: a dense
    ``[rows, *value_shape]`` tensor, or a RaggedTensor for ``ragged`` sequences."""
    if not s.get("ragged"):
        return tf.reshape(tf.io.decode_raw(v, tf.float64), [-1, *s.get("value_shape", [])])
    lengths = tf.strings.length(v) // 8
    flat = tf.io.decode_raw(tf.strings.reduce_join(v), tf.float64)  # every row's bytes, back to back
    return tf.RaggedTensor.from_row_lengths(tf.reshape(flat, [-1]), tf.cast(lengths, tf.int64))


def tfrecord_dataset(ds, plan, input_context, start: tuple[int, int] = (0, 0)):
    """A tf.data pipeline of the dataset's batches, parsed by ``tf.io.parse_example``, and the
    batch count of its first pass: from the files themselves when reading them in order from the
    start (:func:`_files_dataset`); otherwise from our own order (:func:`_records_dataset`: shuffled
    epochs, a saved state), so that a state means the same batches everywhere."""
    if not plan.mode and start == (0, 0):
        return _files_dataset(ds, plan, input_context)
    if plan.mode not in (None, "blocks"):
        return None  # the shuffle buffer: the generic pipeline
    return _records_dataset(ds, plan, input_context, start)


def _files_dataset(ds, plan, input_context):
    """``TFRecordDataset`` over the files in order, batched, then parsed."""
    import tensorflow as tf

    info = ds.manifest.get("tfrecord") or {}
    compression = info.get("compression") or ""
    parse = _parser(ds, plan)
    group = ds.groups[0]
    files = []
    for p in group.parts:
        r = ds.reader(group, p)  # checks the files; opens nothing
        files.append(os.path.abspath(r.path))
    d = tf.data.Dataset.from_tensor_slices(files)
    per_record_shard = None
    rows = [p.rows for p in group.parts]
    total = sum(rows)
    if input_context is not None:
        n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
        if len(files) >= n:
            d = d.shard(n, i)
            total = sum(rows[i::n])
        else:
            per_record_shard = (n, i)
            total = len(range(i, total, n))
    # the files one after the other, as batches() reads them (an interleave costs per record)
    d = tf.data.TFRecordDataset(d, compression_type=compression, buffer_size=4 << 20)
    if per_record_shard:
        d = d.shard(*per_record_shard)
    d = d.batch(plan.batch_size, drop_remainder=plan.drop_remainder)
    batches = total // plan.batch_size if plan.drop_remainder else -(-total // plan.batch_size)
    return d.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True), batches


class _Records:
    """Stands in for the dataset in the loader's cursors: the same parts, read by records readers
    (:meth:`.reader.TfrecordReader.records_reader`), one per part (and per thread when asked)."""

    def __init__(self, ds) -> None:
        self.ds = ds
        self.readers: dict = {}

    def reader(self, group, part, own: bool = False):
        key = (part.key, threading.get_ident()) if own else part.key
        r = self.readers.get(key)
        if r is None:
            r = self.readers[key] = self.ds.reader(group, part, own).records_reader()
        return r


def _records_dataset(ds, plan, input_context, start: tuple[int, int]):
    """Batches of serialized records in the loader's own order (:meth:`Plan.raw_steps`: the same
    positions, blocks and windows as ``batches()``, any reader of ``J``), read and CRC-checked by
    us in a generator, parsed by ``tf.io.parse_example`` in tf.data's threads. Each pass over the
    pipeline is the next epoch."""
    import tensorflow as tf

    from .reader import RECORD

    parse = _parser(ds, plan)
    worker = (0, 1)
    if input_context is not None:
        worker = (input_context.input_pipeline_id, input_context.num_input_pipelines)
    source = _Records(ds)
    passes = itertools.count()

    def records():
        k = next(passes)
        epoch, pos = start[0] + k, (start[1] if k == 0 else 0)
        for _, batch, _ in plan.raw_steps(epoch, worker, pos, source=source):
            yield batch.columns[RECORD]

    b = plan.batch_size if plan.drop_remainder else None
    d = tf.data.Dataset.from_generator(records, output_signature=tf.TensorSpec((b,), tf.string))
    batches = plan.count(start[0], worker[1], worker[0], start[1])
    return d.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True), batches


def _parser(ds, plan):
    """The function from a batch of serialized records to the output dict: ``parse_example`` with
    the manifest's feature spec, float64 decoded from its bytes, sequences padded (plus their
    ``_length``), float16 widened when asked."""
    import tensorflow as tf

    info = ds.manifest.get("tfrecord") or {}
    spec_json = info.get("feature_spec") or {}
    missing = [f.name for f in ds.schema if f.name not in spec_json]
    if missing:
        raise DatasetError(f"{ds.path}: the manifest's feature spec has no '{missing[0]}'", hint="re-create it")
    spec = to_tf_feature_spec({f.name: spec_json[f.name] for f in ds.schema})
    targets = {}
    for f in ds.schema:
        dt = np.dtype(np.float32) if (plan.float32 and f.np_dtype == np.float16) else f.np_dtype
        targets[f.name] = (f, dt)
    pad = plan.pad_value

    def parse(serialized):
        ex = tf.io.parse_example(serialized, spec)
        out = {}
        for name, (f, dt) in targets.items():
            v = ex[name]
            if spec_json[name].get("encoding") == F64:
                v = decode_float64(tf, v, spec_json[name])
            if f.kind == SEQUENCE:
                r = v if isinstance(v, tf.RaggedTensor) else tf.RaggedTensor.from_sparse(v)
                out[name] = tf.cast(r.to_tensor(default_value=tf.cast(pad, r.dtype)), dt)
                out[f"{name}_length"] = r.row_lengths()
            elif f.kind in (STRING, BINARY) or dt.kind in "USO":
                out[name] = v
            else:
                out[name] = v if v.dtype == tf.as_dtype(dt) else tf.cast(v, dt)
        return out

    return parse
