"""``inspect``: what an input holds before converting it (:mod:`.inputs`), what a dataset directory
holds (:mod:`.dataset`), or what files of an output format hold (each format describes its own,
e.g. any TFRecord file); as a JSON-able dict, or text for a terminal (:mod:`.text`)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import OptionsError

__all__ = ["format_text", "inspect"]


def inspect(
    inputs_or_dataset: str | os.PathLike | list[str],
    sample: int | None = None,
    num_buckets: int | None = None,
    *,
    input_format: str | None = None,
    header: bool = True,
    delimiter: str | None = None,
    column_types: dict[str, str] | None = None,
    skip_rows: int = 0,
    comment: str | None = None,
    na_values: list[str] | None = None,
    column_names: list[str] | None = None,
    columns: list[str] | None = None,
    errors: str = "strict",
    max_expansion: float = 1000.0,
    max_memory: int | str = "256MiB",
    estimate: bool = True,
    plot: str | None = None,
    progress: bool | None = False,
    tokenizer: str | None = None,
    column: str | None = None,
    eos: str | int | None = None,
    bos: str | int | None = None,
    on_bad_file: str = "error",
) -> dict[str, Any]:
    """Inspect inputs (paths, globs, ``-``) or one dataset directory; returns a JSON-able dict.

    ``sample``: read only the first ``sample`` rows (figures are then estimates, and say so).
    ``num_buckets``: the K of the suggested length buckets (default 8, with a table for other K).
    ``plot``: write a PNG of the length histograms with the suggested boundaries and their padding
    efficiency, and of the numeric columns' value histograms (needs matplotlib).
    The input keywords are ``convert``'s (``input_format``, ``header``, ``delimiter``, ``skip_rows``,
    ``comment``, ``na_values``, ``column_names``, ...). ``tokenizer`` (with ``column``, ``eos``, ``bos``
    as ``bucket`` takes them): the text column's lengths, suggested buckets and plot are in tokens, as
    ``bucket`` counts them. ``on_bad_file="skip"``: a files input's unreadable files (or names that
    are not UTF-8) are left out and counted, as ``convert`` leaves them out.
    """
    from ..formats import get, names

    if isinstance(inputs_or_dataset, (str, os.PathLike)):
        inputs = [os.fspath(inputs_or_dataset)]
    else:
        inputs = [os.fspath(p) for p in inputs_or_dataset]
    if sample is not None and sample < 1:
        raise OptionsError(f"--sample {sample}: give a positive number of rows")
    if num_buckets is not None and num_buckets < 1:
        raise OptionsError(f"--num-buckets {num_buckets}: give at least 1")
    remote = _remote_dataset(inputs[0]) if len(inputs) == 1 else None
    if remote is not None:
        from .dataset import inspect_dataset

        return inspect_dataset(inputs[0].rstrip("/"), remote)
    directory = len(inputs) == 1 and inputs[0] != "-" and os.path.isdir(inputs[0])
    if directory and input_format is None and not _input_directory(inputs[0]):  # (--input-format: an input)
        if plot:
            raise OptionsError("--plot draws the length histogram of inputs", hint="give input files, not a dataset")
        from .dataset import inspect_dataset

        return inspect_dataset(inputs[0])
    for name in names():
        fmt = get(name)
        if any(fmt.claims_file(p) for p in inputs):
            if plot:
                raise OptionsError(f"--plot draws the length histograms of inputs, not {name} files")
            return fmt.inspect_files(inputs, sample=sample, max_expansion=max_expansion)
    from ..jobs.options import ConvertOptions
    from .inputs import inspect_inputs

    o = ConvertOptions(
        input_format=input_format,
        header=header,
        delimiter=delimiter,
        column_types=dict(column_types or {}),
        skip_rows=skip_rows,
        comment=comment,
        na_values=None if na_values is None else list(na_values),
        column_names=list(column_names) if column_names else None,
        columns=list(columns) if columns else None,
        errors=errors,
        max_expansion=max_expansion,
        max_memory=max_memory,
        tokenizer=tokenizer,
        column=column,
        eos=eos,
        bos=bos,
        on_bad_file=on_bad_file,
    )
    o.validate_inputs()
    o.validate_tokens()
    if plot:
        from .plot import check_plot_path, require_matplotlib

        require_matplotlib()  # before the pass over the input, not after it
        check_plot_path(plot)
    report = inspect_inputs(inputs, o, sample, num_buckets, estimate, progress, plot=bool(plot))
    if plot:
        from .plot import draw_plot

        draw_plot(report, plot)
        report["plot"] = plot
    return report


def _remote_dataset(path: str) -> dict | None:
    """The manifest of a dataset at an object-store URI (checked as ``open_dataset`` checks it),
    None when ``path`` is not a URI or holds no manifest (it is then an input)."""
    from ..storage import is_remote

    if not is_remote(path):
        return None
    from .. import manifest as mf
    from ..errors import DatasetError
    from ..storage import dataset as stored

    m, problem = stored.load(path.rstrip("/"))
    if problem is not None and problem[0] == "missing":
        return None
    if problem is not None or not isinstance(m, dict) or m.get("format") != mf.FORMAT_TAG:
        raise DatasetError(f"{path.rstrip('/')}/{mf.MANIFEST_NAME}: unreadable manifest", hint="re-create the dataset")
    return m


def _input_directory(path: str) -> bool:
    """A directory read as an input (a Hugging Face dataset), not described from a manifest."""
    from .. import manifest as mf
    from ..inputs.sources import directory_kind

    return not mf.is_dataset(path) and directory_kind(path) is not None


def format_text(report: dict[str, Any]) -> str:
    """A report of :func:`inspect` as text for a terminal."""
    from .text import format_text as text

    return text(report)
