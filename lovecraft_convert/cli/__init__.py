"""The ``lovecraft`` command: a thin skin over the library.

Heavy libraries are imported only inside commands, so ``lovecraft --help`` is instant. Library
errors become one ``Error: ...`` line and exit 1 (130 when interrupted); bad flags exit 2; a real
bug keeps its traceback.
"""

from __future__ import annotations

import os
import sys

import click

from ..version import __version__
from .helptext import examples, inputs_block, outputs_block
from .options import JSON_META


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # in the order of a workflow (inspect, convert, shard, bucket, verify)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGS] = list(args)  # for a usage error's JSON: the flags are not parsed then
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        from ..errors import LovecraftError, surface

        with surface("cli"):  # hints name flags (--on-overflow clip), not keyword arguments
            try:
                return super().invoke(ctx)
            except click.UsageError as e:  # click prints it and exits 2
                if "--json" in ctx.meta.get(_ARGS, ()):
                    ctx.meta[JSON_META] = True
                _json_error(ctx, e.format_message(), "usage", e.exit_code)
                raise
            except LovecraftError as e:  # OptionsError exits 2, as a bad flag does
                click.echo(f"Error: {e.one_line()}", err=True)
                _json_error(ctx, e.one_line(), e.kind, e.exit_code)
                sys.exit(e.exit_code)
            except KeyboardInterrupt:
                click.echo("Error: interrupted", err=True)
                _json_error(ctx, "interrupted", "interrupted", 130)
                sys.exit(130)


_ARGS = "lovecraft.args"


def _json_error(ctx: click.Context, message: str, kind: str, code: int) -> None:
    """With --json, a failed run prints its error on stdout as JSON as well (the line stays on
    stderr): a script reading stdout gets an object whichever way the run ended, not nothing."""
    if ctx.meta.get(JSON_META):
        import json

        error = {"message": message, "kind": kind, "exit_code": code}
        click.echo(json.dumps({"ok": False, "error": error}, indent=1))


def _ignore_interrupts() -> None:
    """The run is over and says so: a second Ctrl-C or SIGTERM (or one a library re-sends) must
    not turn exit 130 into death by signal while the interpreter shuts down."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass
    # CPython remembers a KeyboardInterrupt that left code it ran from a string (exec or eval: a
    # namedtuple or dataclass being made in a lazy import when the signal came), even one caught
    # since, and `python -m` then ends by killing itself with SIGINT instead of exiting 130 (seen:
    # 2 in 40 SIGTERMs of a convert). Running a string that does not raise clears the mark.
    exec("pass")


_HELP = f"""Stream datasets larger than RAM into training-ready files.

Five commands: inspect an input, convert it into one dataset, shard it, bucket its sequences by
length (or pack them), and verify a dataset against its manifest. `lovecraft COMMAND --help` for
each one's flags.

{inputs_block()}

{outputs_block()}
"""


@click.group(
    cls=_Group,
    help=_HELP,
    epilog=examples(
        "lovecraft inspect data.csv",
        "lovecraft shard data.csv -o shards/ --to parquet --num-shards 8 --shuffle --seed 7",
        "lovecraft verify shards/",
    ),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="lovecraft")
def cli() -> None:
    pass


def _register() -> None:
    from .bucket import bucket
    from .convert import convert
    from .inspect import inspect
    from .shard import shard
    from .verify import verify

    cli.add_command(inspect)
    cli.add_command(convert)
    cli.add_command(shard)
    cli.add_command(bucket)
    cli.add_command(verify)


_register()


def _few_malloc_arenas() -> None:
    """glibc's malloc gives threads that allocate at once arenas of their own (up to 8 per core),
    and what is freed in one stays resident there for its thread to reuse: our reading, parsing and
    writing threads each kept their own. Four arenas hold less of it (measured, a 2,000-column CSV
    at --max-memory 64MiB: free but resident memory 37 MiB -> 12-22 MiB, peaks 5-12 MiB lower, no
    slower); two made pyarrow's parsing threads wait on each other (CSV -> Parquet 5-13% slower).
    The process only, and not when ``MALLOC_ARENA_MAX`` says otherwise."""
    if sys.platform != "linux" or "MALLOC_ARENA_MAX" in os.environ:
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl's mallopt ignores the option)
        libc.mallopt(-8, 4)  # M_ARENA_MAX: applies to arenas made from now on
    except (OSError, AttributeError):
        pass


def _open_files_to_the_hard_limit() -> None:
    """The process's soft limit of open files (often 1024) raised to its hard limit: a memmap
    dataset holds a file per column open (written, verified or read: np.memmap keeps one each), and
    2,000 columns failed with "Too many open files". The CLI's process only: a library call raises
    it while its memmap writer runs, and puts it back."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass


def main() -> None:
    # We never multiply matrices: without this, NumPy's OpenBLAS starts a thread per core in every
    # process (workers included), and they spin for a while after NumPy is imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # pyarrow's malloc, not its caching mimalloc: a run's buffers come and go a batch at a time, and
    # a cache of freed ones only adds to the peak (measured: 8 MiB less for a 2,000-column CSV at
    # --max-memory 64MiB, 23 MiB less CSV -> Parquet at the default budget, and no slower)
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    _few_malloc_arenas()
    _open_files_to_the_hard_limit()
    from ..runtime.interrupts import ignore_after_commit

    ignore_after_commit()  # a run whose output is complete exits 0, whatever signal comes after
    try:
        cli(prog_name="lovecraft")
    except SystemExit as e:
        if e.code == 130:  # the process only: the library and in-process callers keep their handlers
            _ignore_interrupts()
        raise
