"""Loaders: a dataset directory as NumPy batches, a tf.data pipeline, a Keras PyDataset or a
PyTorch dataset. ``open_dataset(path)`` is the entry point; TensorFlow, Keras and PyTorch are
imported only by the method that needs them (:mod:`.tf`, :mod:`.torch`)."""

from __future__ import annotations

from .dataset import Dataset, open_dataset

__all__ = ["Dataset", "open_dataset"]
