"""What a dataset and a mixture share: batches from their plan, and the frameworks' datasets."""

from __future__ import annotations

from typing import Any

from .state import BatchIterator, plan_options


class Batches:
    """What a dataset and a mixture share: their batches, by their ``plan``, and the frameworks'
    datasets made from them."""

    def plan(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def resumed_plan(
        self, state: dict | None, batch_size: int, shuffle: bool | str, seed: int | None, *args: Any, **kwargs: Any
    ) -> Any:
        """:meth:`plan`, its seed taken from the saved ``state`` when none is given."""
        if state is not None and seed is None and isinstance(state, dict) and shuffle:
            seed = state.get("seed")
        return self.plan(batch_size, shuffle, seed, *args, **kwargs)

    def batches(
        self,
        batch_size: int = 256,
        shuffle: bool | str = False,
        seed: int | None = None,
        epochs: int | None = 1,
        drop_remainder: bool = False,
        dtype_float16: str = "float16",
        *,
        shuffle_buffer: int | None = None,
        pad_to: str = "bucket",
        pad_value: int | float = 0,
        epoch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        state: dict | None = None,
    ) -> BatchIterator:
        """Batches as ``{column: ndarray}``, ``batch_size`` rows each (the last of an epoch may be
        smaller unless ``drop_remainder``), from epoch ``epoch`` on, ``epochs`` of them (None:
        forever).

        ``shuffle``: False; True (an exact permutation for memmap/HDF5, permuted blocks and windows
        for Parquet/TFRecord); "exact"; "blocks"; or "buffer" (the older shuffle buffer, which
        cannot resume). The order of an epoch is a pure function of (seed, epoch); each epoch has
        its own. ``dtype_float16="float32"`` returns float16 columns as float32. Bucketed datasets:
        each batch comes from one bucket, padded to the bucket's length (``pad_to="bucket"``) or
        to the batch's longest (``pad_to="batch"``), with ``length``.

        ``rank`` of ``world_size`` takes batch ``rank`` of every global step of ``world_size``
        batches. The iterator's ``state_dict()`` is where it stands; ``state=`` goes on from a
        saved state (the same order, nothing twice, nothing skipped, with any ``world_size``), in
        time that does not grow with the position. The seed comes from the state when not given.
        """
        opts = plan_options(dtype_float16, shuffle_buffer, pad_to, pad_value)
        plan = self.resumed_plan(state, batch_size, shuffle, seed, drop_remainder, **opts)
        it = BatchIterator(plan, epoch=epoch, epochs=epochs, rank=rank, world_size=world_size, state=state)
        it.views = self.temporal_views()
        return it

    def temporal_views(self) -> dict[str, Any]:
        """The NumPy type (datetime64, timedelta64) that each timestamp, date and duration column's
        int64 counts are viewed as in :meth:`batches` (the frameworks' datasets keep the int64)."""
        schema = getattr(self, "schema", None)
        if schema is None:
            members = getattr(self, "members", None)
            schema = getattr(members[0], "schema", None) if members else None
        views = {}
        for f in schema or ():
            dt = f.logical.numpy_dtype() if f.logical is not None and f.kind == "fixed" and not f.shape else None
            if dt is not None and f.np_dtype.itemsize == 8:
                views[f.name] = dt
        return views

    def to_tf_dataset(self, batch_size: int = 256, **kwargs: Any):
        """A ``tf.data.Dataset`` of batches; see :func:`lovecraft_convert.loaders.tf.to_tf_dataset`."""
        from .tf import to_tf_dataset

        return to_tf_dataset(self, batch_size, **kwargs)

    def to_torch(self, batch_size: int | None = None, **kwargs: Any):
        """A PyTorch dataset; see :func:`lovecraft_convert.loaders.torch.to_torch`."""
        from .torch import to_torch

        return to_torch(self, batch_size, **kwargs)


def _shows(method, fn) -> None:
    """``method`` (``ds.to_torch``) shown as the function it calls (``to_torch(ds, ...)``): its
    keywords, defaults and docstring in ``help()`` and ``inspect.signature`` (they showed
    ``(batch_size=None, **kwargs)`` and one line)."""
    import inspect

    sig = inspect.signature(fn)
    self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = sig.replace(parameters=[self_, *list(sig.parameters.values())[1:]])
    method.__doc__ = fn.__doc__


def _show_loaders() -> None:
    from .tf import to_tf_dataset
    from .torch import to_torch

    _shows(Batches.to_tf_dataset, to_tf_dataset)
    _shows(Batches.to_torch, to_torch)


_show_loaders()
