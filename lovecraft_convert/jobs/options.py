"""The options of ``convert``, ``shard`` and ``bucket`` (the CLI's flags, by the same names), and
their validation: the one place that decides whether options fit together. A mistake is an
:class:`~lovecraft_convert.errors.OptionsError` (exit 2), raised before anything is read or written.
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..errors import OptionsError
from ..formats import DEFAULT as DEFAULT_FORMAT
from ..util import parse_size

FLOAT_TARGETS = ("float16", "float32")
MIN_MEMORY = 16 << 20
PART_BYTES = 64 << 20
LAYOUTS = ("padded", "ragged")
READ_KEYS = ("input_format", "errors", "header", "delimiter", "column_types", "max_expansion", "columns")


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
    delimiter: str | None = None
    header: bool = True
    errors: str = "strict"
    max_expansion: float = 1000.0
    progress: bool | None = None  # None: on when stderr is a terminal

    @classmethod
    def parse(cls, inputs: list[str] | str, kwargs: dict[str, Any]):
        """The options of ``kwargs``, validated, and ``inputs`` as a list (checked against them)."""
        o = cls(**kwargs)
        o.validate()
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        o.check_inputs(inputs)
        return o, inputs

    def check_inputs(self, inputs: list[str]) -> None:
        """Refuse inputs these options cannot take."""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("progress", None)
        return d

    def budget(self) -> int:
        return parse_size(self.max_memory)

    def validate(self) -> None:
        from ..formats import get
        from ..inputs import names as input_names

        fmt = get(self.to)
        if self.input_format is not None and self.input_format not in input_names():
            raise OptionsError(
                f"unknown input format '{self.input_format}'", hint=f"use one of {', '.join(input_names())}"
            )
        if self.dtype is not None and self.dtype not in FLOAT_TARGETS:
            raise OptionsError(
                f"--dtype {self.dtype}: only float16 or float32 downcasting is offered", hint="use --dtype float16"
            )
        if self.on_overflow not in ("error", "clip"):
            raise OptionsError(f"--on-overflow {self.on_overflow}: use error or clip")
        if self.errors not in ("strict", "replace"):
            raise OptionsError(f"--errors {self.errors}: use strict or replace")
        self.compression = fmt.check_compression(self.compression)
        try:
            budget = self.budget()
        except ValueError as e:
            raise OptionsError(f"--max-memory: {e}") from None
        if budget < MIN_MEMORY:
            raise OptionsError(f"--max-memory {self.max_memory} is too small", hint="give at least 16MiB")
        if self.max_expansion < 0:
            raise OptionsError(f"--max-expansion {self.max_expansion}: give a ratio (0: no limit)")

    def read_kwargs(self) -> dict[str, Any]:
        """The keywords of :func:`lovecraft_convert.inputs.open_reader` these options give."""
        return {k: getattr(self, k) for k in READ_KEYS}


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

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between a run and its ``--resume``."""
        d = self.to_dict()
        for k in ("workers", "resume", "overwrite", "progress"):
            d.pop(k, None)
        return d

    def validate(self, *, shards_required: bool = True) -> None:
        super().validate()
        given = sum(x is not None for x in (self.shard_size, self.rows_per_shard, self.num_shards))
        if shards_required and given != 1:
            raise OptionsError("give exactly one of --shard-size, --rows-per-shard, --num-shards")
        if given > 1:
            raise OptionsError("give at most one of --shard-size, --rows-per-shard, --num-shards")
        if self.shuffle and self.seed is None:
            raise OptionsError("--shuffle needs --seed N", hint="the seed makes the shuffle reproducible")
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
        if self.workers is not None and self.workers < 1:
            raise OptionsError("--workers must be at least 1")

    def check_inputs(self, inputs: list[str]) -> None:
        if "-" in inputs and self.resume:
            raise OptionsError("--resume needs file inputs, not stdin")


@dataclass
class BucketOptions(ShardOptions):
    """``shard``'s options plus the bucketing ones."""

    tokenizer: str = "bytes"
    column: str | None = None
    ragged: bool = False
    num_buckets: int | None = None
    boundaries: list[int] | None = None
    max_length: int | None = None
    truncate: bool = False
    drop_longer: bool = False
    min_length: int = 0
    layout: str = "padded"
    pad_id: int | float = 0

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
        if (self.num_buckets is None) == (self.boundaries is None):
            raise OptionsError("give exactly one of --num-buckets and --boundaries")
        if self.num_buckets is not None and self.num_buckets < 1:
            raise OptionsError("--num-buckets must be at least 1")
        if self.layout not in LAYOUTS:
            raise OptionsError(f"--layout {self.layout}: use padded or ragged")
        if self.truncate and self.drop_longer:
            raise OptionsError("give only one of --truncate and --drop-longer")
        if self.max_length is not None and self.max_length < 1:
            raise OptionsError("--max-length must be at least 1")
        if (self.truncate or self.drop_longer) and self.max_length is None and self.boundaries is None:
            flag = "--truncate" if self.truncate else "--drop-longer"
            raise OptionsError(f"{flag} needs --max-length L (or --boundaries: the last one is the limit)")
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
        if self.column_types:
            raise OptionsError("--column-type does not apply to bucket")
        super().validate(shards_required=shards_required)


def takes_options(cls: type[ConvertOptions]):
    """Give a job function the explicit signature of its options: ``(inputs, output, *, <every
    field of cls>, argv=None)``, so that ``help()``, editors and ``inspect.signature`` show every
    keyword with its default (the dataclass stays the one place they are defined)."""

    def wrap(fn):
        P = inspect.Parameter
        params = [
            P("inputs", P.POSITIONAL_OR_KEYWORD, annotation="list[str] | str"),
            P("output", P.POSITIONAL_OR_KEYWORD, annotation="str"),
        ]
        for f in fields(cls):
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            params.append(P(f.name, P.KEYWORD_ONLY, default=default, annotation=f.type))
        params.append(P("argv", P.KEYWORD_ONLY, default=None, annotation="list[str] | None"))
        fn.__signature__ = inspect.Signature(params, return_annotation="dict[str, Any]")
        return fn

    return wrap
