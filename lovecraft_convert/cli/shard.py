"""``lovecraft shard``."""

from __future__ import annotations

import sys

import click

from .options import (
    SHARD_FLAGS,
    TOKEN_FLAGS,
    input_options,
    library_kwargs,
    output_options,
    print_summary,
    shard_options,
    token_options,
)


@click.command()
@input_options
@output_options
@token_options
@shard_options
def shard(**params) -> None:
    """Write INPUTS as many shards of a controlled size.

    \b
    Give exactly one of --shard-size, --rows-per-shard, --num-shards. Shards are named
    part-00003-of-00064.<ext> for every format. The output bytes do not depend on --workers.
    A killed or interrupted run leaves .<output>.partial; --resume finishes it.

    \b
    Examples:
      lovecraft shard data.csv -o shards/ --to tfrecord --shard-size 128MiB
      lovecraft shard x.npy y.npy -o shards/ --to memmap --rows-per-shard 100000
      lovecraft shard corpus.txt.zst -o shards/ --to parquet --num-shards 64 --shuffle --seed 7
      lovecraft shard data.csv -o shards/ --to hdf5 --shard-size 256MiB --resume
      lovecraft shard corpus.jsonl -o shards/ --to megatron --num-shards 8 --tokenizer tokenizer.json --eos '</s>'
    """
    from ..jobs.shard import shard as run

    kwargs = library_kwargs(params)
    for k in (*SHARD_FLAGS, *TOKEN_FLAGS):
        kwargs[k] = params[k]
    manifest = run(list(params["inputs"]), params["output"], argv=sys.argv[1:], **kwargs)
    print_summary(manifest, params["output"], params["as_json"], params["quiet"])
