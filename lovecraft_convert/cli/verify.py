"""``lovecraft verify``."""

from __future__ import annotations

import json

import click

from .helptext import examples
from .options import SizeParam, json_option

HELP = """Check that DATASET holds exactly what its manifest says.

\b
Every listed file exists, nothing else is there, sizes and digests match, each file decodes
completely with its format's reader (checksums included), and rows, schema, statistics and bucket
lengths match the manifest. With --against, the INPUTS are re-read as they were converted and
compared with the dataset (row by row, or as a multiset when shuffled; a bucketed dataset with
the sequences bucket makes of them).
Prints one line per problem, `FILE: what is wrong`, and exits 1 when there is any; 0 otherwise.
Files no reader of the dataset would read (a README, .DS_Store) are warnings on stderr.
"""


@click.command(
    help=HELP,
    short_help="Check that DATASET holds exactly what its manifest says.",
    epilog=examples(
        "lovecraft verify shards/",
        "lovecraft verify out/ --against data.csv",
        "lovecraft verify s3://bucket/shards --json",
    ),
)
@click.argument("paths", nargs=-1, required=True, metavar="DATASET [INPUTS]...")
@click.option(
    "--against",
    is_flag=True,
    help="Also re-read the INPUTS given after DATASET and prove the dataset holds the same records.",
)
@click.option(
    "--max-memory", type=SizeParam(), default="256MiB", show_default=True, help="Memory budget for every buffer."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar, no summary line.")
@json_option("Print the report as JSON on stdout (on failure: the error, as JSON).")
def verify(paths: tuple[str, ...], against: bool, max_memory: int, quiet: bool, as_json: bool) -> None:
    """``lovecraft verify`` (the library's :func:`lovecraft_convert.verify`)."""
    from ..verification import verify as run

    dataset, inputs = paths[0], list(paths[1:])
    if inputs and not against:
        raise click.UsageError("give --against to compare DATASET with INPUTS (lovecraft verify DIR --against FILE...)")
    if against and not inputs:
        raise click.UsageError("--against needs the INPUTS the dataset was made from, after DATASET")
    report = run(dataset, inputs or None, max_memory=max_memory, progress=False if quiet else None)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=1))
    else:
        for line in report.lines():
            click.echo(line)
        if not quiet:
            for line in report.warning_lines():
                click.echo(f"warning: {line}", err=True)
            click.echo(report.summary(), err=not report.ok)
    raise SystemExit(0 if report.ok else 1)
