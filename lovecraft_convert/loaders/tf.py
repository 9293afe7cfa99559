"""tf.data and Keras loaders. TensorFlow and Keras are imported here and nowhere else.

* TFRecord datasets are parsed by ``tf.io.parse_example`` (the manifest's feature spec, whole
  batches): read in order, through ``tf.data.TFRecordDataset`` (shards in order; the file list
  is the pipeline's source, so tf.distribute's file-level auto-sharding, ``AutoShardPolicy.FILE``/
  ``AUTO``, splits the shards between workers); shuffled or from a saved ``state``, from batches
  of serialized records in the loader's own order (see :mod:`..formats.tfrecord.tfdata`).
* Everything else (other formats, bucketed datasets, mixtures) goes through
  ``Dataset.from_generator`` over the loader's own order (:meth:`Plan.steps`) with an exact
  ``output_signature`` (dtypes and row shapes from the schema; the batch dimension is static with
  ``drop_remainder=True``), so that a state means the same batches here as in ``batches()`` and
  PyTorch. Each pass over the dataset (each Keras epoch)
  is a new epoch of the loader: a new order when shuffling, the same for the same seed.
* Under ``strategy.distribute_datasets_from_function``, pass ``input_context=``: each input
  pipeline then reads only its share (whole shards for TFRecord when there are enough of them).
* ``to_keras_pydataset``: a ``keras.utils.PyDataset`` for memmap and HDF5 datasets (random access).

What a batch is (``x``/``y``), so that ``model.fit(ds.to_tf_dataset(...))`` works as written:

* ``y="auto"`` (the default) finds the label: the one column named ``label``, ``labels``, ``y``,
  ``target`` or ``targets`` (none, or more than one: no label). ``y="price"`` names it;
  ``y=["a", "b"]`` gives a dict of several; ``y=None`` asks for no label.
* With a label, batches are ``(inputs, labels)`` tuples. The inputs (``x=None``) are every other
  column: the one tensor when there is one; when there are several and all are numbers of fixed
  shape (a converted CSV's feature columns), one ``[batch, features]`` tensor of them side by side
  in the dataset's column order, as float32 (the input a ``keras.Sequential`` model takes, in the
  dtype its layers compute in); otherwise (text columns, sequences) a dict of them.
  ``x="name"`` gives that column's tensor, ``x=[names]`` a dict (a functional model with named
  ``keras.Input`` layers); ``open_dataset(path, columns=[...])`` chooses the columns to stack.
* Without a label (and no ``x``), batches are a dict of every column (a custom training loop).

Integer columns come as int64 (token ids whatever their stored dtype; other integer columns but
int64 and uint8), as with ``to_torch``; ``keep_dtype=True`` keeps the stored dtypes.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from ..errors import DatasetError, need
from ..schema import BINARY, FIXED, STRING, STRING_LIST
from .common import int64_columns, widen

LABEL_NAMES = ("label", "labels", "y", "target", "targets")


# --------------------------------------------------------------------------------------------
# output structure
# --------------------------------------------------------------------------------------------


def output_fields(plan, ds=None) -> dict[str, tuple[tuple, np.dtype | str]]:
    """Every key a batch of ``plan`` has: name -> (shape with batch dim, numpy dtype or "string")."""
    from .buckets import LENGTH

    ds = plan.ds if ds is None else ds
    if not hasattr(ds, "groups"):  # a mixture: its members' columns
        ds = ds.members[0]
    b = plan.batch_size if plan.drop_remainder else None
    out: dict[str, tuple[tuple, Any]] = {}
    for f in ds.schema:
        dt = np.dtype(np.float32) if (plan.float32 and f.np_dtype == np.float16) else f.np_dtype
        if f.kind == FIXED:
            out[f.name] = ((b, *f.shape), "string" if dt.kind in "USO" else dt)
        elif f.kind in (STRING, BINARY):
            out[f.name] = ((b,), "string")
        elif f.kind == STRING_LIST:
            raise DatasetError(
                f"{ds.path}: column '{f.name}' holds lists of strings, which this tf.data pipeline does not batch",
                hint="select the other columns (columns=[...]), or read it with open_dataset / pyarrow",
            )
        elif ds.bucketed:
            widths = {int(g.bucket["max_length"]) for g in ds.groups}
            width = widths.pop() if len(widths) == 1 and plan.pad_to == "bucket" else None
            out[f.name] = ((b, width), dt)
        else:
            out[f.name] = ((b, None), dt)
            out[f"{f.name}_length"] = ((b,), np.dtype(np.int64))
    if ds.bucketed:
        out[LENGTH] = ((b,), np.dtype(np.int64))
    return out


class Stack:
    """Inputs of several numeric columns as one ``[batch, features]`` tensor (see the module)."""

    def __init__(self, names: list[str], widths: list[int], dtype: np.dtype) -> None:
        self.names, self.widths, self.dtype = names, widths, dtype

    def numpy(self, batch: dict) -> np.ndarray:
        cols = [np.asarray(batch[k]).reshape(-1, w).astype(self.dtype, copy=False) for k, w in self._parts()]
        return np.concatenate(cols, axis=1)

    def tensor(self, tf, batch: dict):
        cols = [tf.reshape(tf.cast(batch[k], self.dtype), [-1, w]) for k, w in self._parts()]
        return tf.concat(cols, axis=1)

    def _parts(self):
        return zip(self.names, self.widths, strict=True)


def _stack(fields: dict, names: list[str]) -> Stack | None:
    """A Stack of ``names`` when every one is a number of fixed shape, else None."""
    widths = []
    for k in names:
        shape, dt = fields[k]
        if isinstance(dt, str) or dt.kind not in "biuf" or any(d is None for d in shape[1:]):
            return None
        widths.append(int(np.prod(shape[1:], dtype=np.int64)))
    return Stack(names, widths, np.dtype(np.float32))  # Keras's float type (CSV numbers are float64/int64)


def _pick(fields: dict, x, y) -> tuple[Any, Any]:
    """(x spec, y spec): None, a name, a list of names, or (x only) a Stack."""
    keys = list(fields)
    if isinstance(y, str) and y == "auto":
        found = [k for k in keys if k in LABEL_NAMES]
        y = found[0] if len(found) == 1 else None
    for name in ([y] if isinstance(y, str) else list(y or [])) + ([x] if isinstance(x, str) else list(x or [])):
        if name not in keys:
            raise DatasetError(f"no column '{name}' in the batches", hint=f"they hold {', '.join(keys)}")
    if x is None and y is not None:
        ys = {y} if isinstance(y, str) else set(y or [])
        rest = [k for k in keys if k not in ys]
        if not rest:
            raise DatasetError(f"the label {y!r} is every column: no inputs are left", hint="select more columns")
        x = rest[0] if len(rest) == 1 else (_stack(fields, rest) or rest)
    return x, y


def _widened(fields: dict, int64: frozenset[str]) -> dict:
    return {k: (shape, np.dtype(np.int64) if k in int64 else dt) for k, (shape, dt) in fields.items()}


def _structure(batch: dict, x, y, stack=None):
    """A batch as the pipeline yields it; ``stack(spec, batch)`` makes a Stack's tensor."""

    def part(spec):
        if isinstance(spec, Stack):
            return stack(spec, batch)
        return batch[spec] if isinstance(spec, str) else {k: batch[k] for k in spec}

    if y is None:
        return batch if x is None else part(x)
    return part(x), part(y)


# --------------------------------------------------------------------------------------------
# tf.data
# --------------------------------------------------------------------------------------------


def to_tf_dataset(
    ds,
    batch_size: int = 256,
    *,
    shuffle: bool | str = False,
    seed: int | None = None,
    drop_remainder: bool = False,
    x: str | list[str] | None = None,
    y: str | list[str] | None = "auto",
    dtype_float16: str = "float16",
    shuffle_buffer: int | None = None,
    pad_to: str = "bucket",
    pad_value: int | float = 0,
    input_context=None,
    prefetch: bool = True,
    epoch: int = 0,
    state: dict | None = None,
    keep_dtype: bool = False,
):
    """A ``tf.data.Dataset`` of batches of ``ds`` (a dataset or a mixture), ready for
    ``model.fit``: ``(inputs, labels)`` when a label column is found or named, the inputs one
    ``[batch, features]`` tensor when they are several numeric columns (see the module docstring
    for ``x``/``y``, the label names found by ``y="auto"`` and ``keep_dtype``)::

        ds = lc.open_dataset("cars/")  # columns: Horsepower, Weight, Acceleration, label
        model.fit(ds.to_tf_dataset(batch_size=256, shuffle=True), epochs=3)
        ds.to_tf_dataset(batch_size=256, y="Miles_per_Gallon")  # a label of another name

    Each pass over it (each Keras epoch) reads the next epoch, from ``epoch`` on; ``state`` (of
    ``batches()``, or ``ds.state_at(...)``) starts the first pass where it stood.
    """
    tf = need("tensorflow", "to_tf_dataset()", "pip install 'lovecraft-convert[tf]'")

    from .state import check_position, check_state, plan_options

    mixture = getattr(ds, "members", None) is not None  # a Mixture
    opts = plan_options(dtype_float16, shuffle_buffer, pad_to, pad_value)
    plan = ds.resumed_plan(state, batch_size, shuffle, seed, drop_remainder, **opts)
    start = check_state(state, plan.identity()) if state is not None else (int(epoch), 0)
    if state is not None:
        check_position(start[1], plan.end(start[0]), start[0])
    int64 = frozenset() if keep_dtype else int64_columns(ds)
    fields = output_fields(plan, ds)  # as read; the int64 columns are widened in the last map
    xs, ys = _pick(_widened(fields, int64), x, y)
    native = None
    if not mixture and not ds.bucketed:
        native = ds.descriptor.tf_dataset(ds, plan, input_context, start)
    if native is not None:
        d, batches = native
    else:
        d, batches = _generator_dataset(tf, plan, fields, input_context, start)
    if state is None:
        # A known length lets Keras show progress and end epochs without "ran out of data" warnings.
        d = d.apply(tf.data.experimental.assert_cardinality(batches))
    if int64 or xs is not None or ys is not None:

        def shape(b):
            b = {k: tf.cast(v, tf.int64) if k in int64 else v for k, v in b.items()}
            return _structure(b, xs, ys, lambda spec, batch: spec.tensor(tf, batch))

        d = d.map(shape)
    if input_context is not None:
        opts = tf.data.Options()
        opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        d = d.with_options(opts)
    return d.prefetch(tf.data.AUTOTUNE) if prefetch else d


def _tf_dtype(tf, dt):
    return tf.string if isinstance(dt, str) else tf.as_dtype(dt)


def _generator_dataset(tf, plan, fields, input_context, start: tuple[int, int]):
    worker = (0, 1)
    if input_context is not None:
        worker = (input_context.input_pipeline_id, input_context.num_input_pipelines)
    signature = {k: tf.TensorSpec(shape, _tf_dtype(tf, dt)) for k, (shape, dt) in fields.items()}
    passes = itertools.count()
    keys = list(fields)
    # TF's registry of generators keeps ``gen`` after the pipeline is dropped: it holds the plan
    # weakly (and so the dataset's open files), the pipeline strongly (its iterators hold it).
    # Held by the closure, 20 epochs of a fresh dataset left 160 files open.
    held = weakref.ref(plan)

    def gen():
        k = next(passes)
        epoch, pos = start[0] + k, (start[1] if k == 0 else 0)
        p = held()
        if p is None:  # (a pipeline's iterator holds the pipeline, and so the plan)
            raise DatasetError("the tf.data pipeline was dropped while it was read")
        for b, _ in p.steps(epoch, worker, pos):
            yield {k: b[k] for k in keys}

    batches = plan.count(start[0], worker[1], worker[0], start[1])
    d = tf.data.Dataset.from_generator(gen, output_signature=signature)
    d._lovecraft_plan = plan  # the datasets made from it hold it (their inputs), and their iterators them
    return d, batches


# --------------------------------------------------------------------------------------------
# Keras
# --------------------------------------------------------------------------------------------

_PYDATASET = None


def _pydataset_class():
    global _PYDATASET
    if _PYDATASET is None:
        import keras

        class KerasPyDataset(keras.utils.PyDataset):
            """Batches of a memmap/HDF5 dataset by index: ``len()`` batches, ``[i]`` batch i of the
            current epoch; a new (seeded) permutation at each epoch's end when shuffling."""

            def __init__(self, ds, plan, x, y, int64=frozenset(), **kwargs):
                super().__init__(**kwargs)
                self.ds = ds
                self.plan = plan
                self.x, self.y = x, y
                self.int64 = int64
                self.epoch = 0
                self._order = None

            def __len__(self) -> int:
                return self.plan.count(0, 1)

            def _perm(self):
                from .common import Permutation

                if self._order is None or self._order[0] != self.epoch:
                    self._order = (self.epoch, Permutation(len(self.ds), self.plan._rng(self.epoch, 0, 0)))
                return self._order[1]

            def __getitem__(self, i: int):
                n = len(self)
                if i < 0:
                    i += n
                if not 0 <= i < n:
                    raise IndexError(f"batch {i} of {n}")
                bs, rows = self.plan.batch_size, len(self.ds)
                a, b = i * bs, min(rows, (i + 1) * bs)
                idx = self._perm()[a:b] if self.plan.mode else np.arange(a, b, dtype=np.int64)
                g = self.ds.groups[0]
                batch = widen(self.plan.emit(g, self.ds.take_rows(g, idx)), self.int64)
                return _structure(batch, self.x, self.y, lambda spec, b: spec.numpy(b))

            def on_epoch_end(self) -> None:
                self.epoch += 1

        KerasPyDataset.__module__ = __name__
        KerasPyDataset.__qualname__ = "KerasPyDataset"
        _PYDATASET = KerasPyDataset
    return _PYDATASET


def __getattr__(name: str):
    if name == "KerasPyDataset":  # made on first use, so that importing this module imports no Keras
        return _pydataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_keras_pydataset(
    ds,
    batch_size: int = 256,
    *,
    shuffle: bool = False,
    seed: int | None = None,
    drop_remainder: bool = False,
    x: str | list[str] | None = None,
    y: str | list[str] | None = "auto",
    dtype_float16: str = "float16",
    workers: int = 1,
    use_multiprocessing: bool = False,
    max_queue_size: int = 10,
    keep_dtype: bool = False,
):
    """A ``keras.utils.PyDataset`` of ``(x, y)`` batches (memmap and HDF5 datasets); ``x``, ``y``
    and ``keep_dtype`` as for :func:`to_tf_dataset`.

    ``shuffle=True`` draws an exact permutation per epoch (seeded by ``(seed, epoch)``).
    """
    need("keras", "to_keras_pydataset()", "pip install keras (or 'lovecraft-convert[tf]')")
    if not ds.random_access or ds.bucketed:
        raise DatasetError(
            f"{ds.path}: a Keras PyDataset needs random access (memmap or hdf5, not bucketed); this is {ds.format}",
            hint="use to_tf_dataset() instead",
        )
    if shuffle not in (False, True, "exact"):
        raise DatasetError(f"shuffle={shuffle!r}: a PyDataset shuffles exactly (True) or not at all")
    plan = ds.plan(batch_size, "exact" if shuffle else False, seed, drop_remainder, dtype_float16)
    int64 = frozenset() if keep_dtype else int64_columns(ds)
    xs, ys = _pick(_widened(output_fields(plan), int64), x, y)
    cls = _pydataset_class()
    return cls(
        ds,
        plan,
        xs,
        ys,
        int64,
        workers=workers,
        use_multiprocessing=use_multiprocessing,
        max_queue_size=max_queue_size,
    )
