"""``lovecraft bucket``."""

from __future__ import annotations

import sys

import click

from .helptext import examples
from .options import (
    SHARD_FLAGS,
    input_options,
    keep_options,
    library_kwargs,
    marker_options,
    output_options,
    print_summary,
    shard_options,
)


class BoundariesParam(click.ParamType):
    name = "N,N,..."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            out = [int(x) for x in value.split(",") if x.strip()]
        except ValueError:
            self.fail(f"{value!r} is not a list of lengths like 32,64,128", param, ctx)
        if not out or any(x < 1 for x in out) or out != sorted(set(out)):
            self.fail(f"{value!r}: give increasing positive lengths, like 32,64,128", param, ctx)
        return out


HELP = """Write variable-length sequences from INPUTS into length buckets, or pack them.

\b
Sequences come from text through --tokenizer (a text file's lines, a CSV column or JSON Lines key
named by --column), CSV rows of numbers (--ragged), or a variable-length column of a lovecraft
dataset directory (--column). Give exactly one of --num-buckets and --boundaries. Each bucket is
written as bucket-00003.<ext> (bucket-00003-part-00000-of-00004.<ext> with shard options), with
the sequence column and a `length` column; the manifest records the boundaries and what padding
each bucket costs.

\b
--layout packed --seq-len L instead concatenates every document (in input order, or a seeded
order with --shuffle --seed) and cuts rows of exactly L tokens with a `doc_starts` column (where
each row's documents start), in shard files part-00000-of-00004.<ext>.
"""


@click.command(
    help=HELP,
    short_help="Write sequences into length buckets, or pack them into rows.",
    epilog=examples(
        "lovecraft bucket corpus.txt -o buckets/ --to memmap --num-buckets 8",
        "lovecraft bucket docs.jsonl -o buckets/ --to tfrecord --boundaries 32,64,128,256 --tokenizer tokenizer.json",
        "lovecraft bucket docs.jsonl -o packed/ --to memmap --layout packed --seq-len 2048 --tokenizer tokenizer.json --eos '</s>'",
    ),
)
@input_options
@output_options
@keep_options
@click.option(
    "--tokenizer",
    default="bytes",
    show_default=True,
    metavar="bytes|chars|PATH",
    help="Text to tokens: UTF-8 bytes, code points, or a Hugging Face tokenizer.json.",
)
@click.option("--column", metavar="NAME", help="CSV or dataset input: the column holding the text or sequences.")
@click.option("--ragged", is_flag=True, help="CSV: each row (of any length) is a sequence of numbers.")
@click.option(
    "--num-buckets",
    type=click.IntRange(min=1),
    help="Choose K boundaries that minimise padding (exact length histogram).",
)
@click.option(
    "--boundaries",
    type=BoundariesParam(),
    help="Inclusive upper lengths, e.g. 32,64,128 (longer rows: one more bucket).",
)
@click.option(
    "--max-length", type=click.IntRange(min=1), help="Longest sequence kept; with --truncate or --drop-longer."
)
@click.option("--truncate", is_flag=True, help="Cut longer sequences to --max-length (or the last boundary).")
@click.option(
    "--drop-longer", is_flag=True, help="Leave out sequences longer than --max-length (or the last boundary)."
)
@click.option(
    "--min-length", type=click.IntRange(min=0), default=0, show_default=True, help="Leave out shorter sequences."
)
@click.option(
    "--layout",
    type=click.Choice(["padded", "ragged", "packed"]),
    default="padded",
    show_default=True,
    help="padded: [rows, bucket max] + lengths; ragged: values + offsets; packed: all sequences concatenated and cut into rows of --seq-len, with each row's document starts.",
)
@click.option("--seq-len", type=click.IntRange(min=1), metavar="L", help="--layout packed: tokens per row.")
@click.option(
    "--pad-last", is_flag=True, help="--layout packed: pad the last partial row with --pad-id (default: drop it)."
)
@marker_options
@click.option(
    "--pad-id",
    type=float,
    default=0,
    show_default=True,
    help="Padding value: a token id with --tokenizer (the token dtype widens to hold it), else a value of the sequences' dtype.",
)
@shard_options
def bucket(**params) -> None:  # fmt: skip
    """``lovecraft bucket``: units of work on the engine (the library's :func:`lovecraft_convert.bucket`)."""
    from ..jobs.bucket import bucket as run

    kwargs = library_kwargs(params)
    pad = params["pad_id"]
    kwargs["pad_id"] = int(pad) if float(pad).is_integer() else pad
    for k in (
        "tokenizer", "column", "ragged", "num_buckets", "boundaries", "max_length", "truncate", "drop_longer",
        "min_length", "layout", "seq_len", "pad_last", "eos", "bos", *SHARD_FLAGS,
    ):  # fmt: skip
        kwargs[k] = params[k]
    manifest = run(list(params["inputs"]), params["output"], argv=sys.argv[1:], **kwargs)
    print_summary(manifest, params["output"], params["as_json"], params["quiet"])
    if not params["quiet"] and not params["as_json"] and not manifest.nothing_to_do and "bucketing" in manifest:
        from ..util import counted, number

        b = manifest["bucketing"]
        single = b["tokens"] / b["single_bucket_padded_tokens"] if b["single_bucket_padded_tokens"] else 1.0
        click.echo(
            f"  {counted(len(manifest['buckets']), 'bucket')}, boundaries {','.join(map(str, b['boundaries']))}; "
            f"padding efficiency {b['padding_efficiency']:.1%} (one bucket: "
            f"{single:.1%}), {number(b['padded_tokens_saved'])} padded tokens saved",
            err=True,
        )
