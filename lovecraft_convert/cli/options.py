"""Option stacks shared by the commands that read inputs and write datasets."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import click

from ..manifest import HASHES

if TYPE_CHECKING:  # pragma: no cover - for annotations only
    from ..result import Manifest

COLUMN_TYPES = (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bool", "string",
)  # fmt: skip


class SizeParam(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        from ..util import parse_size

        try:
            return parse_size(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class RegistryChoice(click.ParamType):
    """A choice among the names of a registry, looked up when the value is parsed (so that formats
    registered at run time are offered, and ``--help`` imports nothing)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "output" | "input"
        self.name = kind

    def _names(self) -> tuple[str, ...]:
        if self.kind == "output":
            from ..formats import names

            return names()
        from ..inputs.kinds import names

        return names()

    def get_metavar(self, param, ctx=None) -> str:
        if self.kind == "output":
            from ..formats import builtin_names

            return "[" + "|".join(builtin_names()) + "|...]"
        from ..inputs.kinds import builtin_names as kinds

        return "[" + "|".join(kinds()) + "|...]"

    def convert(self, value, param, ctx):
        if self.kind == "output":
            from ..formats import builtin_names

            if value in builtin_names():
                return value  # no scan of installed packages' entry points (~30 ms) for a built-in
        names = self._names()
        if value in names:
            return value
        choices = ", ".join(repr(n) for n in names)
        self.fail(f"{value!r} is not one of {choices}.", param, ctx)


class ColumnTypeParam(click.ParamType):
    name = "NAME=TYPE"

    def convert(self, value, param, ctx):
        name, sep, typ = value.rpartition("=")
        if not sep or not name:
            self.fail(f"{value!r} is not NAME=TYPE", param, ctx)
        if typ not in COLUMN_TYPES:
            from ..schema import Logical

            if Logical.parse(typ) is None:
                temporal = ("timestamp[UNIT[, TZ]]", "date", "time[UNIT]", "duration[UNIT]")  # UNIT: s, ms, us, ns
                choices = ", ".join((*COLUMN_TYPES, *temporal, "category"))
                self.fail(f"{value!r}: unknown type {typ!r} (choose from {choices})", param, ctx)
        return name, typ


def _stack(f: Callable, opts: list) -> Callable:
    for o in reversed(opts):
        f = o(f)
    return f


def input_options(f: Callable) -> Callable:
    opts = [
        click.argument("inputs", nargs=-1, required=True),
        click.option("--input-format", type=RegistryChoice("input"), help="Override format detection."),
        click.option("--no-header", "no_header", is_flag=True, help="CSV: the first line is data; columns are f0, f1, ..."),
        click.option("--delimiter", metavar="CHAR", help="CSV field delimiter (default , or tab for .tsv)."),
        click.option("--skip-rows", type=click.IntRange(min=0), default=0, metavar="N", help="CSV: skip N lines before the header (or, with --no-header, the first row)."),
        click.option("--comment", metavar="CHAR", help="CSV: skip lines starting with CHAR (e.g. #)."),
        click.option("--na-values", "na_values", metavar="A,B,...", help="CSV: strings read as missing (NaN) in columns of numbers and booleans, as an empty field is. Default NA,N/A,NULL,null (what R, pandas and pyarrow read as missing); a text column keeps them as text. The list replaces the default; '' for empty fields only."),
        click.option("--column-names", "column_names", metavar="A,B,...", help="CSV: name the columns of a file without a header (the first line is data; to replace a header line, add --skip-rows 1)."),
        click.option("--column-type", "column_types", multiple=True, type=ColumnTypeParam(), help="CSV, JSON Lines, Parquet, Arrow, Hugging Face: fix a column's type, e.g. zip=string, price=float64, 'f*=float32' (a name, a FIRST:LAST range or a pattern, as --stack-columns takes), ts=timestamp (ISO 8601; timestamp[ms], 'timestamp[us, UTC]' for values with a zone offset), day=date, species=category (repeatable)."),
        click.option("--columns", metavar="A,B,...", help="Keep only these columns, in this order (JSON Lines: parse only these keys, e.g. text,meta.lang)."),
        click.option("--errors", type=click.Choice(["strict", "replace"]), default="strict", show_default=True, help="Text, CSV, JSON Lines: invalid UTF-8 is an error, or replaced with U+FFFD."),
        click.option("--max-expansion", type=float, default=1000.0, show_default=True, help="Refuse compressed input inflating more than this ratio."),
    ]  # fmt: skip
    return _stack(f, opts)


def output_options(f: Callable) -> Callable:
    opts = [
        click.option("-o", "--output", required=True, metavar="DIR", help="Output dataset directory (must not exist unless --overwrite)."),
        click.option("--to", "to", type=RegistryChoice("output"), required=True, help="Output format (the formats a package registers are offered too)."),
        click.option("--dtype", type=click.Choice(["float16", "float32"]), help="Downcast floating columns (integer columns are kept; a note names them: --column-type 'pixel*=float16' narrows them too)."),
        click.option("--stack-columns", "stack_columns", multiple=True, metavar="NAME=FIRST:LAST|PATTERN", help="Stack numeric columns into one [rows, k] column NAME (repeatable), e.g. x=c0:c1999 or x='c*'."),
        click.option("--on-overflow", type=click.Choice(["error", "clip"]), default="error", show_default=True, help="A value beyond the --dtype range: fail, or clip to the largest finite value."),
        click.option("--compression", metavar="NAME", help="Compress the output files; each format takes its own (e.g. zstd, snappy, gzip, lzf) or none."),
        click.option("--max-memory", type=SizeParam(), default="256MiB", show_default=True, help="Memory budget for every buffer."),
        click.option("--hash", type=click.Choice(HASHES), default=HASHES[0], show_default=True, help="How the manifest hashes every file (blake3 is several times faster; sha256 for tools that want it)."),
        click.option("--overwrite", is_flag=True, help="Replace an existing output (atomically, once the new one is complete)."),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar."),
        json_option("Print a machine-readable summary on stdout (on failure: the error, as JSON)."),
    ]  # fmt: skip
    return _stack(f, opts)


JSON_META = "lovecraft.json"  # set in the context's meta when --json was given: errors are printed as JSON too


def _mark_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META] = True
    return value


def json_option(help: str) -> Callable:
    """``--json``: eager, so a failure of any later step is reported as JSON too (cli._json_error)."""
    return click.option("--json", "as_json", is_flag=True, is_eager=True, callback=_mark_json, help=help)


ON_BAD_FILE = click.option("--on-bad-file", "on_bad_file", type=click.Choice(["error", "skip"]), default="error", show_default=True, help="Files inputs: a file that cannot be read or decoded (or has no --metadata row) is an error, or is left out and counted in the manifest and summary.")  # fmt: skip


def files_options(f: Callable) -> Callable:
    """The flags of the files and WebDataset inputs (convert and shard)."""
    opts = [
        click.option("--decode", type=click.Choice(["image", "audio"]), help="Files inputs: decode images into a fixed-shape uint8[H,W,C] column 'image' (Pillow), or audio into float32 samples 'audio' (soundfile, mono)."),
        click.option("--image-size", "image_size", metavar="WxH", help="With --decode image: every image brought to WIDTHxHEIGHT (e.g. 224x224) by --resize, with Pillow's bilinear filter (default: all images must have the first one's size)."),
        click.option("--resize", type=click.Choice(["shorter", "fit", "crop", "stretch"]), default="shorter", show_default=True, help="With --image-size: shorter side fitted then centre-cropped (ImageOps.fit), fit inside padded black (ImageOps.pad), centre crop without scaling, or stretch."),
        click.option("--image-mode", "image_mode", type=click.Choice(["L", "RGB", "RGBA"]), help="With --decode image: convert every image to this mode as Image.convert does (default: L, RGB or RGBA from the first image's mode)."),
        click.option("--sample-rate", "sample_rate", type=click.IntRange(min=1), metavar="HZ", help="With --decode audio: resample to this rate (default: the first clip's)."),
        click.option("--metadata", metavar="FILE", help="Files inputs: a CSV or JSON Lines sidecar whose columns join each file by its relative path or stem (key column file_name, path, filename, file or key)."),
        ON_BAD_FILE,
    ]  # fmt: skip
    return _stack(f, opts)


def keep_options(f: Callable) -> Callable:
    """--filter and --dedup (convert, shard, bucket): which rows are written."""
    opts = [
        click.option("--filter", "filter", metavar="EXPR", help="Keep only the rows where EXPR is true, e.g. 'len(text) >= 200 and lang == \"en\"', 'label in (1, 2)', 'not isnan(x)' (comparisons, in (...), and/or/not, len/isnan/isnull/lower/upper; docs/guide/dedup-and-filters.md). Rows removed are counted in the manifest and summary."),
        click.option("--dedup", type=click.Choice(["exact", "near"]), help="exact: drop rows whose --dedup-columns are byte-identical to an earlier row's; near: drop texts whose estimated Jaccard similarity (MinHash over n-grams) to an earlier one reaches --threshold. The first row (in input order) of each group is kept, in bounded memory; the input is read twice. Counted in the manifest and summary."),
        click.option("--dedup-columns", "dedup_columns", metavar="A,B,...", help="With --dedup: the columns compared (exact's default: every column written; near: one text column, by default the text column tokenized)."),
        click.option("--threshold", type=float, metavar="FLOAT", help="With --dedup near: the Jaccard similarity, in (0, 1], from which two texts are duplicates (default 0.8)."),
        click.option("--ngram", type=int, metavar="N", help="With --dedup near: tokens per shingle (default 5)."),
        click.option("--ngram-unit", "ngram_unit", type=click.Choice(["word", "char"]), help="With --dedup near: shingles of whitespace-split words (default) or of characters."),
        click.option("--bands", type=int, metavar="B", help="With --dedup near: LSH bands (default 14); more bands find pairs of lower similarity."),
        click.option("--band-rows", "band_rows", type=int, metavar="R", help="With --dedup near: MinHash values per band (default 8); --bands x --band-rows hashes per text."),
        click.option("--dedup-report", "dedup_report", metavar="FILE", help="With --dedup: write each dropped row's position (input row, file and row in the file) and the row it duplicated to FILE, as JSON Lines."),
    ]  # fmt: skip
    return _stack(f, opts)


def dedup_seed_option(f: Callable) -> Callable:
    """--dedup-seed (convert; shard and bucket seed --dedup near with --seed)."""
    return click.option(
        "--dedup-seed",
        "dedup_seed",
        type=click.IntRange(min=0),
        metavar="N",
        help="With --dedup near: the seed of the MinHash functions (default 0): the same seed gives the same rows.",
    )(f)


FILES_FLAGS = ("decode", "image_size", "resize", "image_mode", "sample_rate", "metadata", "on_bad_file")


def shard_options(f: Callable) -> Callable:
    """The flags of ``shard`` that ``bucket`` takes too (``bucket`` applies them within each bucket)."""
    opts = [
        click.option("--shard-size", type=SizeParam(), help="Output bytes per shard (every shard but the last within 10%)."),
        click.option("--rows-per-shard", type=click.IntRange(min=1), help="Records per shard."),
        click.option("--num-shards", type=click.IntRange(min=1), help="Number of shards (rows split evenly)."),
        click.option("--shuffle", is_flag=True, help="Global shuffle at write time (external, bounded memory); needs --seed."),
        click.option("--seed", type=int, help="Seed of --shuffle (and of --dedup near's MinHash functions, default 0): the same seed gives byte-identical files."),
        click.option("--workers", type=click.IntRange(min=1), help="Parallel worker processes (default: the number of cores)."),
        click.option("--resume", is_flag=True, help="Finish an interrupted run, keeping what it committed."),
        click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True, help="Run the units in local processes or as Ray tasks on a cluster."),
        click.option("--ray-address", metavar="ADDRESS", help="The Ray cluster (default: RAY_ADDRESS, else a local Ray started for the run)."),
    ]  # fmt: skip
    return _stack(f, opts)


MARKER_OPTIONS = [
    click.option("--eos", metavar="TOKEN|ID", help="Append this token after every document: a token of the tokenizer's vocabulary (e.g. '</s>') or an integer id."),
    click.option("--bos", metavar="TOKEN|ID", help="Put this token before every document (a token or an integer id)."),
]  # fmt: skip
TOKEN_OPTIONS = [
    click.option("--tokenizer", metavar="bytes|chars|PATH", help="Tokenize a text column into token ids ('tokens'): UTF-8 bytes, code points, or a Hugging Face tokenizer.json. The output holds the tokens and the columns --columns names."),
    click.option("--column", metavar="NAME", help="With --tokenizer: the text column (default: text)."),
]  # fmt: skip


def marker_options(f: Callable) -> Callable:
    """--eos and --bos: the document markers of tokenized text (convert, shard, bucket)."""
    return _stack(f, MARKER_OPTIONS)


def token_options(f: Callable) -> Callable:
    """--tokenizer and --column (convert and shard; bucket has its own), then the markers."""
    return _stack(marker_options(f), TOKEN_OPTIONS)


TOKEN_FLAGS = ("tokenizer", "column", "eos", "bos")


SHARD_FLAGS = (
    "shard_size",
    "rows_per_shard",
    "num_shards",
    "shuffle",
    "seed",
    "workers",
    "resume",
    "engine",
    "ray_address",
)


def library_kwargs(params: dict) -> dict:
    """Map the shared CLI flags to the library's keyword arguments."""
    return {
        "input_format": params["input_format"],
        "header": not params["no_header"],
        "delimiter": parse_delimiter(params["delimiter"]),
        "column_types": dict(params["column_types"]),
        "skip_rows": params["skip_rows"],
        "comment": params["comment"],
        "na_values": parse_list(params["na_values"]),
        "column_names": parse_list(params["column_names"]),
        "columns": [c for c in params["columns"].split(",") if c] if params["columns"] else None,
        "stack_columns": list(params["stack_columns"]) or None,
        "errors": params["errors"],
        "max_expansion": params["max_expansion"],
        "to": params["to"],
        "dtype": params["dtype"],
        "on_overflow": params["on_overflow"],
        "compression": params["compression"],
        "max_memory": params["max_memory"],
        "hash": params["hash"],
        "overwrite": params["overwrite"],
        "progress": False if params["quiet"] else None,
        "filter": params.get("filter"),
        "dedup": params.get("dedup"),
        "dedup_columns": parse_list(params.get("dedup_columns")),
        "dedup_report": params.get("dedup_report"),
        **{k: params.get(k) for k in ("threshold", "ngram", "ngram_unit", "bands", "band_rows", "dedup_seed")},
    }


def parse_list(value: str | None) -> list[str] | None:
    """A comma-separated flag value as a list (``''``: an empty list); None when not given."""
    if value is None:
        return None
    return [v for v in value.split(",") if v]


def parse_delimiter(d: str | None) -> str | None:
    if d is None:
        return None
    d = {"\\t": "\t", "tab": "\t"}.get(d, d)
    if len(d) != 1:
        raise click.BadParameter(f"{d!r} must be one character", param_hint="--delimiter")
    return d


def summary(manifest: Mapping, output: str) -> dict:
    return {
        "ok": True,
        "output": output,
        "format": manifest["output_format"],
        "rows": manifest["rows"],
        "files": [{k: f[k] for k in ("path", "rows", "bytes", *HASHES) if k in f} for f in manifest["files"]],
        "bytes": sum(f["bytes"] for f in manifest["files"]),
        "schema": manifest["schema"],
        "float16": manifest.get("float16") or {},
        "seconds": manifest.get("seconds"),
        "notes": notes_of(manifest),
        "removed": manifest.get("removed") or {},
    }


def notes_of(manifest: Mapping) -> list[str]:
    """What the run noticed and did not refuse (a delimiter it detected, a header that may be data, columns
    --dtype left as they were): the sources' notes, then the job's."""
    notes = [n for s in manifest.get("sources") or [] if isinstance(s, dict) for n in s.get("notes") or []]
    return notes + list(manifest.get("notes") or [])


def print_summary(manifest: Manifest, output: str, as_json: bool, quiet: bool) -> None:
    s = summary(manifest, output)
    if manifest.nothing_to_do:
        s["nothing_to_do"] = True
    if not manifest.nothing_to_do:
        for note in s["notes"]:  # even with --quiet (it silences progress): these are about the data
            click.echo(f"note: {note}", err=True)
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    if quiet:
        return
    if manifest.nothing_to_do:
        click.echo(f"{output}: already complete, made by the same command and inputs; nothing to do", err=True)
        return
    from ..util import counted, format_size

    click.echo(
        f"wrote {counted(s['rows'], 'row')} to {output} ({s['format']}, {counted(len(s['files']), 'file')}, "
        f"{format_size(s['bytes'])}) in {s['seconds']:.1f}s",
        err=True,
    )
    removed = s["removed"]
    if removed:
        why = [f"{removed['filter']['rows']:,} by --filter"] if "filter" in removed else []
        why += [counted(removed["duplicate"]["rows"], "duplicate")] if "duplicate" in removed else []
        gone = sum(r["rows"] for k, r in removed.items() if k != "read")
        click.echo(f"  removed {counted(gone, 'row')} of {removed['read']:,} read: {', '.join(why)}", err=True)
    for name, r in s["float16"].items():
        click.echo(
            f"  {name} -> {r['target']}: {r['overflow']} overflowed ({r['clipped']} clipped), "
            f"{r['flushed_to_zero']} flushed to zero, max abs error {r['max_abs_error']:.3g}, max rel error {r['max_rel_error']:.3g}",
            err=True,
        )
