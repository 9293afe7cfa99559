"""``lovecraft convert``."""

from __future__ import annotations

import sys

import click

from .helptext import examples, inputs_block, outputs_block
from .options import (
    FILES_FLAGS,
    TOKEN_FLAGS,
    dedup_seed_option,
    files_options,
    input_options,
    keep_options,
    library_kwargs,
    output_options,
    print_summary,
    token_options,
)

HELP = f"""Convert INPUTS into one dataset directory: -o DIR, in the format --to names.

Columns keep their types (CSV and JSON Lines types are inferred over the whole input, or fixed with
--column-type); --dtype float16 downcasts floating columns and counts what it costs; --tokenizer
turns a text column into token ids. Memory stays within --max-memory whatever the input's size.

{inputs_block()}

{outputs_block()}
"""


@click.command(
    help=HELP,
    short_help="Convert INPUTS into one dataset directory.",
    epilog=examples(
        "lovecraft convert data.csv -o out/ --to parquet --column-type zip=string",
        "lovecraft convert features.npy labels.npy -o out/ --to hdf5 --dtype float16",
        "lovecraft convert corpus.jsonl -o mg/ --to megatron --tokenizer tokenizer.json --eos '</s>'",
    ),
)
@input_options
@output_options
@keep_options
@dedup_seed_option
@token_options
@files_options
def convert(**params) -> None:
    """``lovecraft convert``: one streaming pass (the library's :func:`lovecraft_convert.convert`)."""
    from ..jobs.convert import convert as run

    kwargs = library_kwargs(params)
    for k in (*TOKEN_FLAGS, *FILES_FLAGS):
        kwargs[k] = params[k]
    manifest = run(list(params["inputs"]), params["output"], argv=sys.argv[1:], **kwargs)
    print_summary(manifest, params["output"], params["as_json"], params["quiet"])
