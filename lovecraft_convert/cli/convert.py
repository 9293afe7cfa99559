"""``lovecraft convert``."""

from __future__ import annotations

import sys

import click

from .options import TOKEN_FLAGS, input_options, library_kwargs, output_options, print_summary, token_options


@click.command()
@input_options
@output_options
@token_options
def convert(**params) -> None:
    """Convert INPUTS (paths, globs, or - for stdin) into one dataset directory.

    \b
    Examples:
      lovecraft convert data.csv -o out/ --to parquet
      lovecraft convert features.npy labels.npy -o out/ --to hdf5 --dtype float16
      zcat big.csv.gz | lovecraft convert - --input-format csv -o out/ --to tfrecord
      lovecraft convert corpus.txt.zst -o out/ --to memmap
      lovecraft convert corpus.jsonl -o out/ --to megatron --tokenizer tokenizer.json --eos '</s>'
    """
    from ..jobs.convert import convert as run

    kwargs = library_kwargs(params)
    for k in TOKEN_FLAGS:
        kwargs[k] = params[k]
    manifest = run(list(params["inputs"]), params["output"], argv=sys.argv[1:], **kwargs)
    print_summary(manifest, params["output"], params["as_json"], params["quiet"])
