"""The registry of output formats: names to descriptors (:class:`~.base.OutputFormat`).

Built-in formats are packages of this one, listed here by module path so that nothing is imported
until a format is used (and then only its descriptor, which imports nothing heavy). Other formats
are added with :func:`register` (from any importable module: worker processes get the registered
descriptors, pickled by reference to their class, and register them too) or through the
``lovecraft_convert.formats`` entry-point group of an installed package (an entry point names an
``OutputFormat`` instance).

Adding a format is one package under ``formats/`` and one line in ``_BUILTIN``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import DatasetError, OptionsError

if TYPE_CHECKING:  # pragma: no cover - for annotations only
    from .base import OutputFormat

_BUILTIN = {
    "memmap": "lovecraft_convert.formats.memmap",
    "hdf5": "lovecraft_convert.formats.hdf5",
    "parquet": "lovecraft_convert.formats.parquet",
    "tfrecord": "lovecraft_convert.formats.tfrecord",
    "megatron": "lovecraft_convert.formats.megatron",
    "mds": "lovecraft_convert.formats.mds",
    "litdata": "lovecraft_convert.formats.litdata",
    "webdataset": "lovecraft_convert.formats.webdataset",
}
DEFAULT = "parquet"
# One line per built-in format for ``lovecraft --help`` (no descriptor is imported for it: they need
# numpy); tests/test_docs.py checks that every format has one, and a reference page in docs/outputs/.
HELP = {
    "memmap": "one .npy per column: np.load(f, mmap_mode='r')",
    "hdf5": "an HDF5 file per shard, a dataset per column: h5py",
    "parquet": "a Parquet file per shard: pyarrow, pandas, polars, duckdb",
    "tfrecord": "tf.train.Example records: tf.data.TFRecordDataset",
    "megatron": "token ids as Megatron-LM .bin/.idx: megatron-core IndexedDataset",
    "mds": "MosaicML Streaming .mds shards + index.json: streaming.StreamingDataset",
    "litdata": "litdata chunks + index.json: litdata.StreamingDataset",
    "webdataset": "WebDataset .tar shards of <key>.<ext> members: webdataset.WebDataset, tar",
}
ENTRY_POINTS = "lovecraft_convert.formats"

_loaded: dict[str, OutputFormat] = {}
_entry_points_seen = False


def register(fmt: OutputFormat) -> OutputFormat:
    """Make ``fmt`` available by its name, for every command (``--to``, verify, inspect, loaders).
    Its class must be importable by worker processes (defined in a module, not in ``__main__``)."""
    if not fmt.name or not isinstance(fmt.name, str):
        raise ValueError("an output format needs a name")
    if fmt.name in _BUILTIN:
        raise ValueError(f"{fmt.name} is a built-in format")
    _loaded[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Forget a format added with :func:`register` (built-in formats cannot be removed)."""
    if name in _BUILTIN:
        raise ValueError(f"{name} is a built-in format")
    _loaded.pop(name, None)


def names() -> tuple[str, ...]:
    """Every format's name: the built-in ones first, then registered ones in order."""
    _entry_points()
    return tuple(_BUILTIN) + tuple(n for n in _loaded if n not in _BUILTIN)


def builtin_names() -> tuple[str, ...]:
    """The built-in formats' names (no import, no entry-point scan: for the CLI's help)."""
    return tuple(_BUILTIN)


def get(name: str) -> OutputFormat:
    """The descriptor of format ``name``; OptionsError for an unknown name (a bad ``--to``)."""
    fmt = _find(name)
    if fmt is None:
        raise OptionsError(f"unknown output format '{name}'", hint=f"use one of {', '.join(names())}")
    return fmt


def for_dataset(name: object, where: str) -> OutputFormat:
    """The descriptor of a dataset's ``output_format``; DatasetError when this version does not know it."""
    fmt = _find(name) if isinstance(name, str) else None
    if fmt is None:
        raise DatasetError(
            f"{where}: unknown output format {name!r}",
            hint=f"this version reads {', '.join(names())}",
            kind="manifest",
        )
    return fmt


def plugins() -> list:
    """The formats and input kinds registered at run time (handed to worker processes, which
    register them too: :func:`load_plugins`)."""
    from ..inputs.kinds import plugins as input_kinds

    return [f for n, f in _loaded.items() if n not in _BUILTIN] + input_kinds()


def worker_setup() -> tuple | None:
    """What a worker process runs before its first unit so that it knows the formats and input
    kinds registered here at run time: ``(load_plugins, plugins())`` (the engine calls
    ``load_plugins(plugins())`` there), or None when none are."""
    items = plugins()
    return (load_plugins, items) if items else None


def load_plugins(items: list) -> None:
    """Register the formats and input kinds of :func:`plugins` (in a worker process)."""
    from ..inputs.kinds import InputKind
    from ..inputs.kinds import load_plugins as load_kinds

    load_kinds([x for x in items if isinstance(x, InputKind)])
    for f in items:
        if not isinstance(f, InputKind):
            _loaded.setdefault(f.name, f)


def _find(name: str) -> OutputFormat | None:
    fmt = _loaded.get(name)
    if fmt is not None:
        return fmt
    if name in _BUILTIN:
        fmt = importlib.import_module(_BUILTIN[name]).FORMAT
        _loaded[name] = fmt
        return fmt
    _entry_points()
    return _loaded.get(name)


def _entry_points() -> None:
    """Formats of installed packages (entry-point group ``lovecraft_convert.formats``), once."""
    global _entry_points_seen
    if _entry_points_seen:
        return
    _entry_points_seen = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name not in _loaded and ep.name not in _BUILTIN:
            register(ep.load())
