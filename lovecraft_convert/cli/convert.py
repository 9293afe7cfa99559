"""``lovecraft convert``."""

from __future__ import annotations

import sys

import click

from .options import input_options, library_kwargs, output_options, print_summary


@click.command()
@input_options
@output_options
def convert(**params) -> None:
    """Convert INPUTS (paths, globs, or - for stdin) into one dataset directory.

    \b
    Examples:
      lovecraft convert data.csv -o out/ --to parquet
      lovecraft convert features.npy labels.npy -o out/ --to hdf5 --dtype float16
      zcat big.csv.gz | lovecraft convert - --input-format csv -o out/ --to tfrecord
      lovecraft convert corpus.txt.zst -o out/ --to memmap
    """
    from ..jobs.convert import convert as run

    manifest = run(list(params["inputs"]), params["output"], argv=sys.argv[1:], **library_kwargs(params))
    print_summary(manifest, params["output"], params["as_json"], params["quiet"])
