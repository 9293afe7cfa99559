"""The options of ``convert``, ``shard`` and ``bucket`` (the CLI's flags, by the same names), and
their validation: the one place that decides whether options fit together. A mistake is an
:class:`~lovecraft_convert.errors.OptionsError` (exit 2), raised before anything is read or written.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..engine.journal import VOLATILE_OPTIONS
from ..errors import OptionsError, flag, spelled
from ..formats import DEFAULT as DEFAULT_FORMAT
from ..manifest import DEFAULT_HASH, HASHES
from ..util import parse_size

FLOAT_TARGETS = ("float16", "float32")
NEAR_KEYS = ("threshold", "ngram", "ngram_unit", "bands", "band_rows", "dedup_seed")  # --dedup near's parameters
MIN_MEMORY = 16 << 20
PART_BYTES = 64 << 20
LAYOUTS = ("padded", "ragged", "packed")
READ_KEYS = (
    "input_format", "errors", "header", "delimiter", "column_types", "skip_rows", "comment", "max_expansion",
    "columns", "na_values", "column_names", "stack_columns",
)  # fmt: skip


def _given(name: str, value: Any) -> str:
    """An option and the value given, as the caller spelled them: ``--skip-rows -1`` on the command
    line, ``skip_rows=-1`` from Python (the value as Python writes it, quotes and escapes shown)."""
    return spelled(f"--{name.replace('_', '-')} {value!r}", f"{name}={value!r}")


@dataclass
class ConvertOptions:
    """Everything ``convert`` takes besides inputs and output."""

    to: str = DEFAULT_FORMAT
    input_format: str | None = None
    dtype: str | None = None
    on_overflow: str = "error"
    max_memory: int | str = "256MiB"
    overwrite: bool = False
    compression: str | None = None
    column_types: dict[str, str] = field(default_factory=dict)
    columns: list[str] | None = None
    stack_columns: list[str] | None = None  # NAME=FIRST:LAST or NAME=PATTERN: one [rows, k] column
    delimiter: str | None = None
    header: bool = True
    skip_rows: int = 0  # CSV: lines before the header (or, without one, the first row)
    comment: str | None = None  # CSV: lines starting with this character are skipped
    na_values: list[str] | None = None  # CSV: strings read as missing in number columns (None: NA, N/A, NULL, null)
    column_names: list[str] | None = None  # CSV: the names of the columns of a file without a header
    errors: str = "strict"
    max_expansion: float = 1000.0
    hash: str = DEFAULT_HASH  # how every file is hashed in the manifest (blake3 | sha256)
    tokenizer: str | None = None  # bytes | chars | a tokenizer.json: --column's text becomes token ids
    column: str | None = None  # the text column to tokenize (default: text)
    eos: str | int | None = None  # a token (or id) appended to every document
    bos: str | int | None = None  # a token (or id) put before every document
    decode: str | None = None  # files inputs: image | audio (decoded into fixed-shape images, float32 audio)
    image_size: str | list[int] | None = None  # WIDTHxHEIGHT of decoded images (default: the first image's)
    resize: str = "shorter"  # how images get --image-size: shorter | fit | crop | stretch
    image_mode: str | None = None  # L | RGB | RGBA (default: from the first image's mode)
    sample_rate: int | None = None  # decoded audio's rate in Hz (default: the first clip's)
    metadata: str | None = None  # a CSV or JSON Lines sidecar joined to the files by path or stem
    on_bad_file: str = "error"  # a file that does not read or decode: error | skip (counted)
    filter: str | None = None  # an expression over columns: only the rows where it is true are kept
    dedup: str | None = None  # exact: rows whose --dedup-columns are byte-identical to an earlier row's are dropped
    dedup_columns: list[str] | None = None  # the columns compared (default: the columns written)
    dedup_report: str | None = None  # a JSON Lines file listing each dropped row and the row it duplicated
    threshold: float | None = None  # near: the Jaccard similarity from which rows are duplicates (default 0.8)
    ngram: int | None = None  # near: tokens per shingle (default 5)
    ngram_unit: str | None = None  # near: word (whitespace-split, the default) or char
    bands: int | None = None  # near: LSH bands (default 14)
    band_rows: int | None = None  # near: MinHash values per band (default 8)
    dedup_seed: int | None = None  # near: the seed of the MinHash functions (default 0; shard and bucket: --seed)
    progress: bool | None = None  # None: on when stderr is a terminal

    @classmethod
    def parse(cls, inputs: Any, kwargs: dict[str, Any]):
        """The options of ``kwargs``, validated, and ``inputs`` as a list (checked against them)."""
        from ..inputs import paths_or_data

        o = cls(**kwargs)
        o.validate()
        paths, data = paths_or_data(inputs)
        if paths is None:
            raise OptionsError(
                "this job reads its inputs in parts, in parallel; data held in memory is read once, in order",
                hint="convert it first (lovecraft_convert.convert), then give the dataset directory it wrote",
            )
        o.check_inputs(paths)
        return o, paths

    def check_inputs(self, inputs: list[str]) -> None:
        """Refuse inputs these options cannot take."""

    def check_types(self) -> None:
        """Keyword arguments of the Python API checked against their fields' types before anything
        else: a list option given as a string is read as the CLI reads its flag (``columns="a,b"``
        was read a character at a time: columns ``a``, ``,``, ``b``), and a value of another type is
        refused in one line (``seed="7"`` failed deep inside the shuffle, ``num_shards=2.5`` as a
        count of records)."""
        for f in fields(self):
            v, kind = getattr(self, f.name), str(f.type)
            if v is None:
                continue
            if kind.startswith("list[str]"):
                if isinstance(v, str):  # the CLI's spelling: comma-separated (stack_columns: one each)
                    v = [v] if f.name == "stack_columns" else [x for x in v.split(",") if x]
                elif isinstance(v, tuple):
                    v = list(v)
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise OptionsError(f"{f.name}={v!r}: give a list of strings (or one comma-separated string)")
                setattr(self, f.name, v)
            elif kind in ("int", "int | None") and (isinstance(v, bool) or not isinstance(v, int)):
                if isinstance(v, float) and v.is_integer():
                    setattr(self, f.name, int(v))
                    continue
                raise OptionsError(f"{f.name}={v!r}: give an integer")
            elif kind in ("bool", "bool | None") and not isinstance(v, bool):
                raise OptionsError(f"{f.name}={v!r}: give True or False")
            elif kind in ("float", "float | None") and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise OptionsError(f"{f.name}={v!r}: give a number")
            elif kind in ("str", "str | None") and not isinstance(v, str):
                if not isinstance(v, os.PathLike):
                    raise OptionsError(f"{f.name}={v!r}: give a string")
                setattr(self, f.name, os.fspath(v))  # (a path: a report, a tokenizer, a metadata file)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("progress", None)
        return d

    def budget(self) -> int:
        return parse_size(self.max_memory)

    def validate(self) -> None:
        from ..formats import get
        from ..inputs import names as input_names

        self.check_types()
        fmt = get(self.to)
        if self.input_format is not None and self.input_format not in input_names():
            raise OptionsError(
                f"unknown input format '{self.input_format}'", hint=f"use one of {', '.join(input_names())}"
            )
        if self.dtype is not None and self.dtype not in FLOAT_TARGETS:
            raise OptionsError(
                f"--dtype {self.dtype}: only float16 or float32 downcasting is offered",
                hint=f"use {flag('dtype', 'float16')}",
            )
        if self.on_overflow not in ("error", "clip"):
            raise OptionsError(f"--on-overflow {self.on_overflow}: use error or clip")
        if self.stack_columns:
            from ..transforms.stack import parse

            for spec in self.stack_columns:
                parse(spec)
        if self.hash not in HASHES:
            raise OptionsError(f"--hash {self.hash}: use one of {', '.join(HASHES)}")
        if self.errors not in ("strict", "replace"):
            raise OptionsError(f"--errors {self.errors}: use strict or replace")
        self.validate_tokens()
        self.validate_inputs()
        self.validate_keep()
        from ..inputs.filedecode import check_options

        files = check_options(
            self.decode,
            self.image_size,
            self.resize,
            self.image_mode,
            self.sample_rate,
            self.metadata,
            self.on_bad_file,
        )
        if files is not None and files["image_size"] is not None:
            self.image_size = "x".join(map(str, files["image_size"]))  # one spelling in the manifest
        if files is not None and files["metadata"] is not None and "://" not in files["metadata"]:
            import os

            self.metadata = os.path.abspath(self.metadata)  # verify --against reads it from anywhere
        self.compression = fmt.check_compression(self.compression)
        try:
            budget = self.budget()
        except ValueError as e:
            raise OptionsError(f"--max-memory: {e}") from None
        if budget < MIN_MEMORY:
            raise OptionsError(
                f"--max-memory {self.max_memory} is too small",
                hint=f"give at least {spelled('16MiB', 'max_memory=' + repr('16MiB'))}",
            )
        self.max_memory = budget  # bytes from here on: what the manifest and the fingerprint record
        if self.max_expansion < 0:
            raise OptionsError(f"--max-expansion {self.max_expansion}: give a ratio (0: no limit)")

    def validate_tokens(self) -> None:
        """--column, --eos and --bos go with --tokenizer; the markers are looked up when it is loaded."""
        if self.tokenizer is None:
            for opt, v in (("--column", self.column), ("--eos", self.eos), ("--bos", self.bos)):
                if v is not None:
                    raise OptionsError(
                        f"{opt} goes with --tokenizer", hint="add --tokenizer bytes|chars|tokenizer.json"
                    )
        elif not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise OptionsError(f"--tokenizer {self.tokenizer!r}: give bytes, chars or the path of a tokenizer.json")

    def validate_keep(self) -> None:
        """--filter (parsed here: a syntax error is a usage error), --dedup and its companions."""
        if self.filter is not None:
            from ..transforms.filter import Filter

            Filter(self.filter)
        if self.dedup is not None:
            from ..transforms.dedup import MODES

            if self.dedup not in MODES:
                raise OptionsError(f"--dedup {self.dedup}: use {' or '.join(MODES)}")
        if self.dedup == "near":
            self.near_params()  # checked
        else:
            for name in NEAR_KEYS:
                if getattr(self, name) is not None:
                    raise OptionsError(f"--{name.replace('_', '-')} goes with --dedup near", hint="add --dedup near")
        if self.dedup is None:
            for opt, v in (("--dedup-columns", self.dedup_columns), ("--dedup-report", self.dedup_report)):
                if v is not None:
                    raise OptionsError(f"{opt} goes with --dedup", hint="add --dedup exact")
        if self.dedup_report is not None and not isinstance(self.dedup_report, str):
            raise OptionsError(f"--dedup-report {self.dedup_report!r}: not a path", hint="name a file")
        if self.dedup_columns is not None and (
            not self.dedup_columns or not all(isinstance(c, str) and c for c in self.dedup_columns)
        ):
            given = (
                ",".join(map(str, self.dedup_columns))
                if isinstance(self.dedup_columns, list | tuple)
                else self.dedup_columns
            )
            raise OptionsError(f"--dedup-columns {given!r}: give column names, e.g. text or a,b")

    def near_params(self):
        """The :class:`~lovecraft_convert.transforms.near.NearParams` of ``--dedup near`` (defaults
        where not given), checked."""
        from ..transforms.near import NearParams

        return NearParams.given(vars(self)).check()

    def keep_columns(self) -> list[str]:
        """The columns the keep step reads besides those written: the filter's and --dedup-columns."""
        out: list[str] = []
        if self.filter is not None:
            from ..transforms.filter import Filter

            out += Filter(self.filter).columns
        return out + list(self.dedup_columns or [])

    def tokenizer_source(self) -> list[dict]:
        """The tokenizer file as the manifest's sources list it (a changed file is a changed input for
        ``--resume``), or nothing for the built-in tokenizers."""
        if self.tokenizer is None:
            return []
        import os

        from ..transforms.tokenize import BUILTIN

        if self.tokenizer in BUILTIN or not os.path.isfile(self.tokenizer):
            return []
        st = os.stat(self.tokenizer)
        path = os.path.abspath(self.tokenizer)
        return [{"name": self.tokenizer, "path": path, "size": st.st_size, "mtime": st.st_mtime, "format": "tokenizer"}]

    def local_files(self) -> dict[str, str]:
        """Option name -> the local file the units read for it (a tokenizer file): what a run whose
        units share nothing with its driver puts on the store for them (engine/units.py)."""
        sources = self.tokenizer_source()
        return {"tokenizer": sources[0]["path"]} if sources else {}

    def validate_inputs(self) -> None:
        """The CSV syntax options (inspect takes them too)."""
        for name, c in (("delimiter", self.delimiter), ("comment", self.comment)):
            if c is None:
                continue
            if not isinstance(c, str) or len(c) != 1 or not c.isascii():
                raise OptionsError(f"{_given(name, c)}: give one ASCII character")
            if c in '"\r\n':
                raise OptionsError(
                    f"{_given(name, c)} cannot be a quote or a line end", hint="choose another character"
                )
        if self.comment is not None and self.comment == self.delimiter:
            raise OptionsError(
                f"{_given('comment', self.comment)} is the delimiter too", hint="choose another character"
            )
        if not isinstance(self.skip_rows, int) or isinstance(self.skip_rows, bool) or self.skip_rows < 0:
            raise OptionsError(f"{_given('skip_rows', self.skip_rows)}: give a number of lines, 0 or more")
        if self.na_values is not None:
            if isinstance(self.na_values, str):
                self.na_values = [v for v in self.na_values.split(",") if v]
            if not all(isinstance(v, str) for v in self.na_values):
                raise OptionsError(f"--na-values {self.na_values!r}: give strings, e.g. NA,-999")
            self.na_values = list(dict.fromkeys(v for v in self.na_values if v))
        if self.column_names is not None:
            if isinstance(self.column_names, str):
                self.column_names = self.column_names.split(",")
            names = list(self.column_names)
            if not names or not all(isinstance(n, str) and n for n in names):
                raise OptionsError(f"--column-names {self.column_names!r}: give names, e.g. a,b,c")
            dup = next((n for n in names if names.count(n) > 1), None)
            if dup is not None:
                raise OptionsError(f"--column-names: '{dup}' is given twice", hint="give each column its own name")
            self.column_names = names
            self.header = False  # the names replace a header: the first line (after --skip-rows) is data

    def read_kwargs(self) -> dict[str, Any]:
        """The keywords of :func:`lovecraft_convert.inputs.open_reader` these options give. When
        ``--columns`` names a stacked column, whose members the reader's columns decide, every column
        is read (the selection is made after reading).

        Tokenizing, the text column (``--column``, else ``text``) is read besides the ``--columns``
        kept: ``--columns id --column body`` reads ``id`` and ``body`` and writes ``id`` and the
        tokens of ``body``."""
        kw = {k: getattr(self, k) for k in READ_KEYS}
        from ..inputs.filedecode import check_options

        kw["files"] = check_options(
            self.decode,
            self.image_size,
            self.resize,
            self.image_mode,
            self.sample_rate,
            self.metadata,
            self.on_bad_file,
        )
        if self.tokenizer is not None and self.columns:
            text = self.column or "text"
            kw["columns"] = list(dict.fromkeys([*self.columns, text]))
            kw["text_column"] = text
        if kw["columns"] and self.keep_columns():
            kw["columns"] = list(dict.fromkeys([*kw["columns"], *self.keep_columns()]))
        if self.columns and self.stack_columns:
            from ..transforms.stack import parse

            stacked = {parse(spec)[0] for spec in self.stack_columns}
            if stacked & set(self.columns):
                kw["columns"] = None
        return kw


@dataclass
class ShardOptions(ConvertOptions):
    """``convert``'s options plus the sharding ones."""

    shard_size: int | str | None = None
    rows_per_shard: int | None = None
    num_shards: int | None = None
    shuffle: bool = False
    seed: int | None = None
    workers: int | None = None
    resume: bool = False
    part_bytes: int = PART_BYTES
    engine: str = "local"  # local processes, or Ray tasks (--engine ray)
    ray_address: str | None = None  # the Ray cluster (default RAY_ADDRESS, else a local Ray for the run)

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between a run and its ``--resume``."""
        return {k: v for k, v in self.to_dict().items() if k not in VOLATILE_OPTIONS}

    def validate(self, *, shards_required: bool = True) -> None:
        super().validate()
        given = sum(x is not None for x in (self.shard_size, self.rows_per_shard, self.num_shards))
        if shards_required and given != 1:
            raise OptionsError("give exactly one of --shard-size, --rows-per-shard, --num-shards")
        if given > 1:
            raise OptionsError("give at most one of --shard-size, --rows-per-shard, --num-shards")
        if self.shuffle and self.seed is None:
            raise OptionsError("--shuffle needs --seed N", hint="the seed makes the shuffle reproducible")
        if self.dedup == "near" and self.seed is not None:  # --seed seeds the MinHash functions too
            if self.dedup_seed is not None and self.dedup_seed != self.seed:
                raise OptionsError(f"--dedup-seed {self.dedup_seed} differs from --seed {self.seed}: give one")
            self.dedup_seed = self.seed
        if (self.rows_per_shard is not None and self.rows_per_shard < 1) or (
            self.num_shards is not None and self.num_shards < 1
        ):
            raise OptionsError("--rows-per-shard and --num-shards must be at least 1")
        if self.shard_size is not None:
            try:
                size = parse_size(self.shard_size)
            except ValueError as e:
                raise OptionsError(f"--shard-size: {e}") from None
            if size < 1:
                raise OptionsError("--shard-size must be at least 1 byte")
            self.shard_size = size
        if self.workers is not None and self.workers < 1:
            raise OptionsError("--workers must be at least 1")
        from ..engine.executors import ENGINES

        if self.engine not in ENGINES:
            raise OptionsError(f"--engine {self.engine}: use one of {', '.join(ENGINES)}")
        if self.ray_address and self.engine != "ray":
            raise OptionsError("--ray-address applies to --engine ray")

    def check_inputs(self, inputs: list[str]) -> None:
        if "-" in inputs and self.resume:
            raise OptionsError("--resume needs file inputs, not stdin")


@dataclass
class BucketOptions(ShardOptions):
    """``shard``'s options plus the bucketing ones."""

    tokenizer: str | None = "bytes"
    ragged: bool = False
    num_buckets: int | None = None
    boundaries: list[int] | None = None
    max_length: int | None = None
    truncate: bool = False
    drop_longer: bool = False
    min_length: int = 0
    layout: str = "padded"
    pad_id: int | float = 0
    seq_len: int | None = None  # packed: tokens per row
    pad_last: bool = False  # packed: pad the last partial row instead of dropping it

    def limit(self) -> int | None:
        """The longest sequence kept (longer ones are truncated or dropped), if any."""
        if self.max_length is not None:
            return self.max_length
        if (self.truncate or self.drop_longer) and self.boundaries:
            return self.boundaries[-1]
        return None

    def validate(self, *, shards_required: bool = False) -> None:
        if self.boundaries is not None:
            b = list(self.boundaries)
            if all(isinstance(x, (int, float, str)) and not isinstance(x, bool) for x in b):
                try:
                    b = self.boundaries = [int(x) for x in b]
                except ValueError:
                    pass
            if not b or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in b) or b != sorted(set(b)):
                raise OptionsError(
                    f"--boundaries {','.join(map(str, b))}: give increasing positive lengths, like 32,64,128"
                )
        if self.layout not in LAYOUTS:
            raise OptionsError(f"--layout {self.layout}: use padded, ragged or packed")
        if self.layout == "packed":
            self.validate_packed()
        elif self.seq_len is not None or self.pad_last:
            raise OptionsError(
                f"{'--seq-len' if self.seq_len is not None else '--pad-last'} goes with --layout packed",
                hint="add --layout packed, or drop it",
            )
        elif (self.num_buckets is None) == (self.boundaries is None):
            raise OptionsError("give exactly one of --num-buckets and --boundaries")
        if self.num_buckets is not None and self.num_buckets < 1:
            raise OptionsError("--num-buckets must be at least 1")
        if self.truncate and self.drop_longer:
            raise OptionsError("give only one of --truncate and --drop-longer")
        if self.max_length is not None and self.max_length < 1:
            raise OptionsError("--max-length must be at least 1")
        if (self.truncate or self.drop_longer) and self.max_length is None and self.boundaries is None:
            opt = "--truncate" if self.truncate else "--drop-longer"
            raise OptionsError(f"{opt} needs --max-length L (or --boundaries: the last one is the limit)")
        if self.max_length is not None and not (self.truncate or self.drop_longer):
            raise OptionsError(
                f"--max-length {self.max_length}: say what happens to longer sequences",
                hint="add --truncate or --drop-longer",
            )
        if self.min_length < 0:
            raise OptionsError("--min-length must be at least 0")
        if self.max_length is not None and self.min_length > self.max_length:
            raise OptionsError(f"--min-length {self.min_length} is more than --max-length {self.max_length}")
        if self.dtype is not None:
            raise OptionsError(
                "--dtype does not apply to bucket", hint="token and value dtypes are chosen from the data"
            )
        if self.columns:
            raise OptionsError("--columns does not apply to bucket", hint="use --column NAME")
        if self.stack_columns:
            raise OptionsError("--stack-columns does not apply to bucket")
        if self.column_types:
            raise OptionsError("--column-type does not apply to bucket")
        if self.ragged and (self.na_values is not None or self.column_names is not None):
            raise OptionsError("--na-values and --column-names do not apply to --ragged (its rows are numbers)")
        if self.ragged and (self.eos is not None or self.bos is not None):
            raise OptionsError("--eos and --bos mark documents of text; --ragged rows are numbers", hint="drop them")
        super().validate(shards_required=shards_required)

    def validate_packed(self) -> None:
        """--layout packed: rows of exactly --seq-len tokens, no length buckets."""
        if self.seq_len is None:
            raise OptionsError("--layout packed needs --seq-len L", hint="the tokens of every row, e.g. --seq-len 2048")
        if isinstance(self.seq_len, bool) or not isinstance(self.seq_len, int) or self.seq_len < 1:
            raise OptionsError(f"--seq-len {self.seq_len!r}: give the tokens of every row, 1 or more")
        given = [
            opt
            for opt, v in (
                ("--num-buckets", self.num_buckets is not None),
                ("--boundaries", self.boundaries is not None),
                ("--max-length", self.max_length is not None),
                ("--truncate", self.truncate),
                ("--drop-longer", self.drop_longer),
                ("--min-length", bool(self.min_length)),
            )
            if v
        ]
        if given:
            raise OptionsError(
                f"{given[0]} does not apply to --layout packed", hint="packed rows all have --seq-len tokens"
            )

    def validate_tokens(self) -> None:
        """bucket always reads text through a tokenizer (bytes by default); --column also names a
        dataset's sequence column."""
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise OptionsError(f"--tokenizer {self.tokenizer!r}: give bytes, chars or the path of a tokenizer.json")


def takes_options(cls: type[ConvertOptions]):
    """Make a job function public: give it the explicit signature of its options (``(inputs,
    output, *, <every field of cls>, argv=None)``, so that ``help()``, editors and
    ``inspect.signature`` show every keyword with its default, the dataclass staying the one place
    they are defined), and return the manifest dict it commits as a typed, frozen
    :class:`~lovecraft_convert.result.Manifest`."""

    def wrap(fn):
        names = {f.name for f in fields(cls)}

        @functools.wraps(fn)
        def job(inputs, output, *, argv=None, **kwargs):
            from ..engine.executors import leave_if_rerun_by_spawn
            from ..result import Manifest

            leave_if_rerun_by_spawn()
            unknown = sorted(set(kwargs) - names)
            if unknown:  # (a TypeError naming the options' dataclass)
                import difflib

                near = difflib.get_close_matches(unknown[0], sorted(names), 1, 0.8)
                raise OptionsError(
                    f"{fn.__name__}() got an unexpected keyword argument '{unknown[0]}'",
                    hint=f"did you mean {near[0]}?" if near else "see help(lovecraft_convert." + fn.__name__ + ")",
                )
            if isinstance(output, os.PathLike):
                output = os.fspath(output)
            if not isinstance(output, str):
                raise OptionsError(f"output={output!r}: give the path of the output directory")
            if inputs is None:
                raise OptionsError(
                    "inputs=None: give a path, a list of paths" + (" or data" if fn.__name__ == "convert" else "")
                )
            return Manifest.of(fn(inputs, output, argv=argv, **kwargs), output)

        P = inspect.Parameter
        params = [
            P("inputs", P.POSITIONAL_OR_KEYWORD, annotation=INPUTS_ANNOTATION.get(fn.__name__, "list[str] | str")),
            P("output", P.POSITIONAL_OR_KEYWORD, annotation="str"),
        ]
        for f in fields(cls):
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            params.append(P(f.name, P.KEYWORD_ONLY, default=default, annotation=f.type))
        params.append(P("argv", P.KEYWORD_ONLY, default=None, annotation="list[str] | None"))
        job.__signature__ = inspect.Signature(params, return_annotation="Manifest")
        from ..result import Manifest  # the class itself: typing.get_type_hints could not resolve the name

        job.__annotations__ = {**fn.__annotations__, "return": Manifest}
        return job

    return wrap


# convert also reads data held in memory (pyarrow streams, anything with __arrow_c_stream__, dicts of arrays)
INPUTS_ANNOTATION = {"convert": "list[str] | str | pyarrow.RecordBatchReader | ArrowStreamExportable | Iterable[dict]"}
