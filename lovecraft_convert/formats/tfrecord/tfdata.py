"""TFRecord datasets in tf.data: ``TFRecordDataset`` over the shards (interleaved), the manifest's
feature spec for ``tf.io.parse_example`` on whole batches. The file list is the pipeline's source,
so tf.distribute's file-level auto-sharding splits the shards between workers."""

from __future__ import annotations

import os

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


def tfrecord_dataset(ds, plan, input_context):
    """A tf.data pipeline over the dataset's TFRecord files (in order: shuffled epochs go through
    the loader's own block order, so that a saved state means the same everywhere) and the batch
    count of an epoch."""
    import tensorflow as tf

    info = ds.manifest.get("tfrecord") or {}
    spec_json = info.get("feature_spec") or {}
    missing = [f.name for f in ds.schema if f.name not in spec_json]
    if missing:
        raise DatasetError(f"{ds.path}: the manifest's feature spec has no '{missing[0]}'", hint="re-create it")
    spec = to_tf_feature_spec({f.name: spec_json[f.name] for f in ds.schema})
    compression = info.get("compression") or ""
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
    d = d.interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression, buffer_size=4 << 20),
        cycle_length=max(1, min(4, len(files))),
        block_length=16,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if per_record_shard:
        d = d.shard(*per_record_shard)
    d = d.batch(plan.batch_size, drop_remainder=plan.drop_remainder)
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

    batches = total // plan.batch_size if plan.drop_remainder else -(-total // plan.batch_size)
    return d.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True), batches
