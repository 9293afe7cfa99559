"""The registry of output formats: names to descriptors (:class:`~.base.OutputFormat`).

Built-in formats are packages of this one, listed here by module path so that nothing is imported
until a format is used (and then only its descriptor, which imports nothing heavy). Other formats
are added with :func:`register` (from any module: its name is remembered so that worker processes
import it too) or through the ``lovecraft_convert.formats`` entry-point group of an installed
package (an entry point names an ``OutputFormat`` instance).

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
}
DEFAULT = "parquet"
ENTRY_POINTS = "lovecraft_convert.formats"

_loaded: dict[str, OutputFormat] = {}
_plugins: list[str] = []  # modules whose import registered a format (workers import them again)
_entry_points_seen = False


def register(fmt: OutputFormat, *, module: str | None = None) -> OutputFormat:
    """Make ``fmt`` available by its name, for every command (``--to``, verify, inspect, loaders).

    ``module`` (default: the module that defines ``fmt``'s class) is imported again in worker
    processes so that they know the format too.
    """
    if not fmt.name or not isinstance(fmt.name, str):
        raise ValueError("an output format needs a name")
    _loaded[fmt.name] = fmt
    mod = module or type(fmt).__module__
    if fmt.name not in _BUILTIN and mod not in _plugins and mod != "__main__":
        _plugins.append(mod)
    return fmt


def unregister(name: str) -> None:
    """Forget a format added with :func:`register` (built-in formats cannot be removed)."""
    if name in _BUILTIN:
        raise ValueError(f"{name} is a built-in format")
    fmt = _loaded.pop(name, None)
    if fmt is not None:
        mod = type(fmt).__module__
        if mod in _plugins and not any(type(f).__module__ == mod for f in _loaded.values()):
            _plugins.remove(mod)


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


def plugin_modules() -> list[str]:
    """Modules that registered formats at run time (for worker processes to import)."""
    return list(_plugins)


def load_plugins(modules: list[str]) -> None:
    """Import the modules of :func:`plugin_modules` (in a worker process)."""
    for m in modules:
        importlib.import_module(m)


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
            fmt = ep.load()
            register(fmt, module=ep.module)
