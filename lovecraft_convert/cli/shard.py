"""``lovecraft shard``."""

from __future__ import annotations

import sys

import click

from .helptext import examples
from .options import (
    FILES_FLAGS,
    SHARD_FLAGS,
    TOKEN_FLAGS,
    files_options,
    input_options,
    keep_options,
    library_kwargs,
    output_options,
    print_summary,
    shard_options,
    token_options,
)

HELP = """Write INPUTS as many shards of a controlled size.

\b
Everything convert takes, plus exactly one of --shard-size, --rows-per-shard, --num-shards.
Shards are named part-00003-of-00064.<ext> in every format. --shuffle --seed N shuffles globally
at write time in bounded memory. The output bytes do not depend on --workers. A killed or
interrupted run leaves .<output>.partial; the same command with --resume finishes it.
"""


@click.command(
    help=HELP,
    short_help="Write INPUTS as shards of a controlled size.",
    epilog=examples(
        "lovecraft shard data.csv -o shards/ --to tfrecord --shard-size 128MiB",
        "lovecraft shard 'c4/*.jsonl.gz' -o shards/ --to parquet --num-shards 64 --shuffle --seed 7 --resume",
        "lovecraft shard corpus.jsonl -o mg/ --to megatron --num-shards 8 --tokenizer tokenizer.json --eos '</s>'",
    ),
)
@input_options
@output_options
@keep_options
@token_options
@shard_options
@files_options
def shard(**params) -> None:
    """``lovecraft shard``: units of work on the engine (the library's :func:`lovecraft_convert.shard`)."""
    from ..jobs.shard import shard as run

    kwargs = library_kwargs(params)
    for k in (*SHARD_FLAGS, *TOKEN_FLAGS, *FILES_FLAGS):
        kwargs[k] = params[k]
    manifest = run(list(params["inputs"]), params["output"], argv=sys.argv[1:], **kwargs)
    print_summary(manifest, params["output"], params["as_json"], params["quiet"])
