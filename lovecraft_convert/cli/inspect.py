"""``lovecraft inspect``."""

from __future__ import annotations

import json

import click

from .helptext import examples, inputs_block
from .options import ON_BAD_FILE, SizeParam, input_options, json_option, parse_delimiter, parse_list

HELP = f"""Describe INPUTS before converting them, or a dataset directory from its manifest.

\b
For inputs: kind, compression, size, rows; per column the dtype, shape, NaN, min, max, mean and
what float16 would cost; for text and sequences the length distribution, a histogram and
length-bucket boundaries with their padding efficiency; the output size per format.
For a dataset directory: format, schema, rows, shards, sizes, the float16 report, the command that
made it, and the code that loads it. For a .tfrecord file or a Megatron .idx: what it holds.

{inputs_block()}
"""


@click.command(
    help=HELP,
    short_help="Describe INPUTS, or a dataset directory from its manifest.",
    epilog=examples(
        "lovecraft inspect data.csv",
        "lovecraft inspect corpus.txt.zst --num-buckets 16 --plot lengths.png",
        "lovecraft inspect shards/",
    ),
)
@input_options
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    metavar="N",
    help="Read only the first N rows: a quick estimate (said to be one).",
)
@click.option(
    "--num-buckets", type=click.IntRange(min=1), metavar="K", help="Suggest K length-bucket boundaries (default 8)."
)
@click.option(
    "--plot",
    metavar="FILE.png",
    help="Draw a PNG: length histograms with the bucket boundaries and padding efficiency by K; value histograms "
    "of numeric columns with the float16 range (needs matplotlib).",
)
@click.option(
    "--max-memory", type=SizeParam(), default="256MiB", show_default=True, help="Memory budget for every buffer."
)
@click.option(
    "--tokenizer",
    metavar="bytes|chars|FILE.json",
    help="Measure the text column's lengths in tokens (as bucket counts them): buckets and --plot in tokens.",
)
@click.option("--column", metavar="NAME", help="With --tokenizer: the text column (default: text).")
@click.option("--eos", metavar="TOKEN", help="With --tokenizer: a token after every document, counted as bucket does.")
@click.option("--bos", metavar="TOKEN", help="With --tokenizer: a token before every document.")
@ON_BAD_FILE
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@json_option("Print the report as JSON on stdout (on failure: the error, as JSON).")
def inspect(**params) -> None:
    """``lovecraft inspect`` (the library's :func:`lovecraft_convert.inspect`)."""
    from ..inspection import format_text
    from ..inspection import inspect as run

    report = run(
        list(params["inputs"]),
        sample=params["sample"],
        num_buckets=params["num_buckets"],
        input_format=params["input_format"],
        header=not params["no_header"],
        delimiter=parse_delimiter(params["delimiter"]),
        column_types=dict(params["column_types"]),
        skip_rows=params["skip_rows"],
        comment=params["comment"],
        na_values=parse_list(params["na_values"]),
        column_names=parse_list(params["column_names"]),
        columns=[c for c in params["columns"].split(",") if c] if params["columns"] else None,
        errors=params["errors"],
        max_expansion=params["max_expansion"],
        max_memory=params["max_memory"],
        plot=params["plot"],
        progress=False if params["quiet"] else None,
        tokenizer=params["tokenizer"],
        column=params["column"],
        eos=params["eos"],
        bos=params["bos"],
        on_bad_file=params["on_bad_file"],
    )
    if params["as_json"]:
        click.echo(json.dumps(report, indent=1, default=_default))
    else:
        click.echo(format_text(report), nl=False)


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(type(o))
