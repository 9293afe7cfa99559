"""A format's descriptor: the composite of its four parts, and the names a format package uses.

A format is one package under ``formats/`` whose ``__init__`` defines one :class:`OutputFormat`
(the *descriptor*): its name, file extensions, the compressions it takes, whether it has random
access, and its parts, each a class or function in a module of the package that is imported only
when used. The descriptor answers four small interfaces (:mod:`.protocols`), each with its defaults
in a module of its own:

* :class:`~.protocols.Writes` (:mod:`.writing`): the :class:`Writer` of a unit (``convert``,
  ``shard`` and ``bucket`` write through it) and the manifest keys of a dataset;
* :class:`~.protocols.Reads` (:mod:`.reading`): the :class:`PartReader` for ``open_dataset`` (the
  loaders) and what a manifest of the format may claim;
* :class:`~.protocols.Checks` (:mod:`.checking`): the checker for ``verify``
  (:meth:`~.checking.CheckingPart.check_unit`: decode a shard's files completely, with the format's
  own checksums, raising :class:`FileProblem`);
* :class:`~.protocols.Describes` (:mod:`.describing`): the load snippets for ``inspect``.

The descriptor module itself imports nothing heavy, so the registry (:mod:`lovecraft_convert.formats`)
can list formats without importing h5py, pyarrow or TensorFlow. Nothing outside the format packages
names a particular format: every command dispatches through the descriptor.

The names a format (or a plugin format) needs are importable from here as they always were.
"""

from __future__ import annotations

from .checking import CheckContext, CheckingPart, FileProblem, Unit, short
from .describing import DescribingPart, Idents, py_ident, py_str
from .reading import CORRUPT, PartFiles, PartReader, ReadingPart
from .writing import ColumnBlock, FileRecord, WriteOptions, Writer, WritingPart

__all__ = [
    "CORRUPT",
    "CheckContext",
    "ColumnBlock",
    "FileProblem",
    "FileRecord",
    "Idents",
    "OutputFormat",
    "PartFiles",
    "PartReader",
    "Unit",
    "WriteOptions",
    "Writer",
    "py_ident",
    "py_str",
    "short",
]


class OutputFormat(WritingPart, ReadingPart, CheckingPart, DescribingPart):
    """One output format. Subclass it in the format's package and register one instance.

    Class attributes describe the format; methods give its parts. Override what differs from the
    defaults; the parts (``writer_class``, ``open_part``, ``check_unit``, ``load_snippets``) must
    be given.
    """
