"""Inputs as the user names them: paths, globs and ``-`` resolved to :class:`InputSpec`s, with their
compression and input kind detected (by name, then by content)."""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass

from ..errors import InputError
from .streams import open_stream, stdin_buffer

COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd", ".zstd": "zstd"}
MAGIC = [(b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd")]


@dataclass
class InputSpec:
    """One input: a path (or ``-``), its compression and format, and what the manifest records."""

    path: str
    name: str
    compression: str | None = None
    format: str | None = None
    size: int | None = None
    mtime: float | None = None
    stdin_spool: str | None = None  # stdin is spooled to this file when it must be read twice
    notes: dict | None = None  # what the reader decided about it that the manifest records (column types)
    directory: bool = False  # a dataset on an object store (a prefix holding a manifest)
    # CSV: the delimiter its first lines showed, sniffed once by the first reader that needed it and
    # carried with the spec to the units that read it (a shard of many small files reads each once)
    sniffed_delimiter: str | None = None

    @property
    def is_stdin(self) -> bool:
        return self.path == "-"

    @property
    def base_ext(self) -> str:
        """The extension before any compression extension (``.csv`` of ``a.csv.gz``)."""
        base = self.path.lower()
        for ext in COMPRESSIONS:
            if base.endswith(ext):
                base = base[: -len(ext)]
        return os.path.splitext(base)[1]

    @property
    def stem(self) -> str:
        base = os.path.basename(self.path if not self.is_stdin else "stdin")
        for ext in COMPRESSIONS:
            if base.endswith(ext):
                base = base[: -len(ext)]
        return os.path.splitext(base)[0]

    def describe(self) -> dict:
        d = {
            "name": self.name,
            "path": None if self.is_stdin else _absolute(self.path),
            "size": self.size,
            "mtime": self.mtime,
            "format": self.format,
            "compression": self.compression,
        }
        if self.notes:
            d.update(self.notes)
        return d

    @property
    def is_dir(self) -> bool:
        return self.directory or (not self.is_stdin and "://" not in self.path and os.path.isdir(self.path))


def _absolute(path: str) -> str:
    from ..storage import is_remote

    return path if is_remote(path) else os.path.abspath(path)


def resolve_inputs(specs: list[str], input_format: str | None = None) -> list[InputSpec]:
    """Expand globs, check every path is a readable file, detect compression and format."""
    if not specs:
        raise InputError("no input given", hint="pass one or more files, globs, or - for stdin")
    from ..storage import is_remote, local_path

    out: list[InputSpec] = []
    for spec in specs:
        if spec == "-":
            out.append(InputSpec("-", "<stdin>"))
            continue
        if is_remote(spec):
            out.extend(_remote_specs(spec))
            continue
        spec = local_path(spec)
        if glob.has_magic(spec) and not os.path.exists(spec):
            matches = sorted(glob.glob(spec))
            if not matches:
                raise InputError(f"{spec}: no file matches this pattern", hint="check the glob")
            paths = matches
        else:
            paths = [spec]
        for p in paths:
            out.append(_check_file(p, input_format))
    if sum(1 for s in out if s.is_stdin) > 1:
        raise InputError("stdin (-) given more than once")
    for s in out:
        if s.is_dir:
            s.format = input_format or s.format
            continue
        s.compression = detect_compression(s)
        s.format = input_format or detect_format(s)
    return out


def _remote_specs(uri: str) -> list[InputSpec]:
    """The objects a URI names (an object, a prefix, a glob), as inputs."""
    from ..storage import is_remote, list_matches

    if is_remote(uri) and not any(c in uri for c in "*?["):
        from ..storage.dataset import manifest_bytes

        if manifest_bytes(uri.rstrip("/")) is not None:  # a dataset lovecraft wrote, read as an input
            return [InputSpec(uri.rstrip("/"), uri.rstrip("/"), format="dataset", directory=True)]
    found = list_matches(uri)
    if not found:
        what = "no object matches this pattern" if any(c in uri for c in "*?[") else "no such object or prefix"
        raise InputError(f"{uri}: {what}", hint="check the URI (s3://bucket/key, a prefix, or a glob)")
    return [InputSpec(u, u, size=size) for u, size in found]


def _check_file(p: str, input_format: str | None = None) -> InputSpec:
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file", hint="check the path") from None
    except PermissionError:
        raise InputError(f"{p}: permission denied", hint="check the file's permissions") from None
    if stat.S_ISDIR(st.st_mode):
        from .kinds import FILES

        kind = FILES if input_format == FILES else directory_kind(p)
        if kind is None:
            raise InputError(f"{p}: is a directory, not a file", hint=_directory_hint(p))
        # a tree of files is counted by its reader, when the count is needed (never by the workers)
        return InputSpec(p, p, format=kind, size=None if kind == FILES else _tree_size(p), mtime=st.st_mtime)
    if not os.access(p, os.R_OK):
        raise InputError(f"{p}: permission denied", hint="check the file's permissions")
    return InputSpec(p, p, size=st.st_size if stat.S_ISREG(st.st_mode) else None, mtime=st.st_mtime)


def directory_kind(path: str) -> str | None:
    """The input kind of a directory, from the files that mark it (:data:`.kinds.DIRECTORIES`);
    one without a marker is a tree of files, unless files of a kind recognised by name are among
    its first thousand (then it is more likely a mistake for a glob: None)."""
    from .filetree import holds_data_files
    from .kinds import DIRECTORIES, EXTENSIONS, FILES

    for marker, kind in DIRECTORIES:
        if os.path.isfile(os.path.join(path, marker)):
            return kind
    data = {ext for ext, kind in EXTENSIONS.items() if kind != FILES} | set(COMPRESSIONS)
    return FILES if holds_data_files(path, data) is None else None


def _directory_hint(path: str) -> str:
    from .filetree import holds_data_files
    from .kinds import EXTENSIONS, FILES

    found = holds_data_files(path, {ext for ext, kind in EXTENSIONS.items() if kind != FILES} | set(COMPRESSIONS))
    ext = os.path.splitext(found)[1] if found else ".csv"
    return f"pass the files inside it, e.g. a glob like dir/*{ext}, or --input-format files to read each file as a row"


def _tree_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _peek(spec: InputSpec, n: int = 8) -> bytes:
    if spec.is_stdin:
        return stdin_buffer().peek(n)[:n]
    from ..storage import open_input

    with open_input(spec.path, readahead=64 << 10) as f:
        return f.read(n)


def detect_compression(spec: InputSpec) -> str | None:
    head = _peek(spec)
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    lower = spec.path.lower()
    for ext, name in COMPRESSIONS.items():
        if lower.endswith(ext):
            if spec.size == 0:
                return None
            raise InputError(f"{spec.name}: named {ext} but is not {name}-compressed", hint="rename it or re-create it")
    return None


def detect_format(spec: InputSpec) -> str:
    """The input kind of ``spec``: from its extension (before any compression extension), else from
    the first bytes of its (decompressed) content."""
    from .kinds import EXTENSIONS, MAGICS, TEXT_MAGICS, names

    ext = spec.base_ext
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    if not spec.is_stdin:
        with open_stream(spec) as f:
            head = f.read(4096)
        for magic, kind in MAGICS:
            if head.startswith(magic):
                return kind
        text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
        for magic, kind in TEXT_MAGICS:
            if text.startswith(magic):
                return kind
    raise InputError(
        f"{spec.name}: cannot tell the input format from its name or content",
        hint=f"pass --input-format {', '.join(names()[:-1])} or {names()[-1]}",
    )
