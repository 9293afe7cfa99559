"""Inputs as the user names them: paths, globs and ``-`` resolved to :class:`~.spec.InputSpec`s,
with their compression and input kind detected (by name, then by content)."""

from __future__ import annotations

import glob
import os
import stat

from ..errors import InputError
from .spec import COMPRESSIONS, InputSpec
from .streams import open_stream, spooled_stdin, stdin_buffer

MAGIC = [(b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd")]


def resolve_inputs(specs: list[str], input_format: str | None = None) -> list[InputSpec]:
    """Expand globs, check every path is a readable file, detect compression and format."""
    if not specs:
        raise InputError("no input given", hint="pass one or more files, globs, or - for stdin")
    from ..storage import is_remote, local_path

    out: list[InputSpec] = []
    for spec in specs:
        if spec == "-":
            spool = spooled_stdin()  # read again (bucket's second reader): the copy, not the drained pipe
            size = os.path.getsize(spool) if spool is not None else None
            out.append(InputSpec("-", "<stdin>", stdin_spool=spool, size=size))
            continue
        if is_remote(spec):
            out.extend(_remote_specs(spec))
            continue
        spec = local_path(spec)
        if glob.has_magic(spec) and not os.path.exists(spec):
            matches = sorted(glob.glob(spec, recursive=True))  # ``**``: any number of folders, none included
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
        head = _peek(s)  # (one look at the first bytes: a run of many small files opens each few times)
        s.compression = detect_compression(s, head)
        s.format = input_format or detect_format(s, head)
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
        from ..manifest import interrupted

        stopped = interrupted(p)  # (the output of an interrupted run: its work, and --resume)
        if stopped is not None:
            raise InputError(stopped[0], hint=stopped[1]) from None
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
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        # its kind is told from its first bytes, then it is opened again (and by each worker): a
        # pipe's first bytes went to the look (a JSON Lines 'line 1: not valid JSON'), and a second
        # open waited for a writer that never came (--dedup hung)
        raise InputError(
            f"{p}: is a pipe (a process substitution or a mkfifo), which can be read only once",
            hint="pipe it to stdin instead (... | lovecraft convert - --input-format KIND), or write it to a file",
        )
    return InputSpec(p, p, size=st.st_size if stat.S_ISREG(st.st_mode) else None, mtime=st.st_mtime)


def directory_kind(path: str) -> str | None:
    """The input kind of a directory, from the files that mark it (:func:`.kinds.markers`); one
    without a marker is a tree of files, unless files of a kind recognised by name are among its
    first thousand (then it is more likely a mistake for a glob: None)."""
    from .filetree import holds_data_files
    from .kinds import FILES, markers

    for marker, kind in markers():
        if os.path.isfile(os.path.join(path, marker)):
            return kind
    return FILES if holds_data_files(path, _data_extensions()) is None else None


def _data_extensions() -> set[str]:
    """The extensions that name a file of a kind other than ``files`` (registered kinds' too), and
    the compressions'."""
    from .kinds import EXTENSIONS, FILES, plugins

    named = {ext for ext, kind in EXTENSIONS.items() if kind != FILES}
    return named | {e.lower() for k in plugins() for e in k.extensions} | set(COMPRESSIONS)


def _directory_hint(path: str) -> str:
    from .filetree import holds_data_files

    found = holds_data_files(path, _data_extensions())
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
    if spec.is_stdin and spec.stdin_spool:
        with open(spec.stdin_spool, "rb") as f:
            return f.read(n)
    if spec.is_stdin:
        return stdin_buffer().peek(n)[:n]
    from ..storage import open_input

    with open_input(spec.path, readahead=64 << 10) as f:
        return f.read(n)


def detect_compression(spec: InputSpec, head: bytes | None = None) -> str | None:
    head = _peek(spec) if head is None else head
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    if len(head) >= 4 and int.from_bytes(head[:4], "little") & 0xFFFFFFF0 == 0x184D2A50:
        return "zstd"  # a zstd skippable frame first (pzstd writes one before each frame)
    lower = spec.path.lower()
    for ext, name in COMPRESSIONS.items():
        if lower.endswith(ext):
            if spec.size == 0:
                return None
            raise InputError(f"{spec.name}: named {ext} but is not {name}-compressed", hint="rename it or re-create it")
    return None


def detect_format(spec: InputSpec, head: bytes | None = None) -> str:
    """The input kind of ``spec``: from its extension (before any compression extension), else from
    the first bytes of its (decompressed) content. ``head``: the file's first bytes, when read."""
    from .kinds import by_content, by_extension, names

    kind = by_extension(spec.base_ext)
    if kind is not None:
        if head is not None and spec.compression is None:
            _check_named_kind(spec, kind, head)
        return kind
    if not spec.is_stdin:
        with open_stream(spec) as f:
            head = f.read(4096)
        kind = by_content(head)
        if kind is not None:
            return kind
    raise InputError(
        f"{spec.name}: cannot tell the input format from its name or content",
        hint=f"pass --input-format {', '.join(names()[:-1])} or {names()[-1]}",
    )


def _check_named_kind(spec: InputSpec, kind: str, head: bytes) -> None:
    """A local file whose first bytes are another kind's magic (a Parquet file named ``.csv``, an
    NPY file named ``.parquet``) is refused naming the kind it is: read as its name says, it fails
    later in that reader's words (a CSV's "invalid UTF-8 ... pass --errors replace", which only
    turns the bytes into other errors)."""
    from ..storage import is_remote
    from .kinds import MAGIC_KINDS, MAGICS, OTHER_BOMS, TEXT_KINDS

    if spec.is_stdin or is_remote(spec.path):
        return
    if kind in TEXT_KINDS:
        enc = next((e for bom, e in OTHER_BOMS if head.startswith(bom)), None)
        if enc is not None:
            raise InputError(
                f"{spec.name}: {enc} text (a {enc[:6]} byte order mark begins it); lovecraft reads text as UTF-8",
                hint=f"re-encode it, e.g. iconv -f {enc[:6]} -t UTF-8 {spec.name} > utf8{spec.base_ext}",
            )
    for magic, real in MAGICS:
        if head.startswith(magic) and real != kind:
            what, tail, hint = MAGIC_KINDS.get(real, (f"a {real} file", b"", None))
            if tail and not _ends_with(spec, tail):  # (a CSV whose first field is PAR1)
                continue
            raise InputError(
                f"{spec.name}: named {spec.base_ext}, but it is {what} (its first bytes)",
                hint=hint or f"pass --input-format {real}, or rename it",
            )


def _ends_with(spec: InputSpec, tail: bytes) -> bool:
    try:
        with open(spec.path, "rb") as f:
            f.seek(max(0, os.path.getsize(spec.path) - len(tail)))
            return f.read() == tail
    except OSError:
        return False
