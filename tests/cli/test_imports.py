"""The CLI is a skin: importing it pulls in none of the heavy libraries."""

from __future__ import annotations

import subprocess
import sys


def test_cli_import_is_light():
    code = (
        "import sys, lovecraft_convert.cli, lovecraft_convert;"
        "heavy = [m for m in ('tensorflow', 'h5py', 'pyarrow', 'torch', 'polars', 'numpy', 'matplotlib', 'ray') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", "--help"], capture_output=True, text=True, check=True
    )
    assert "convert" in out.stdout


def test_tfrecord_writer_does_not_import_tensorflow(tmp_path):
    code = (
        "import sys, numpy as np; np.save(sys.argv[1] + '/x.npy', np.ones((4, 2), np.float32));"
        "from lovecraft_convert import convert; convert([sys.argv[1] + '/x.npy'], sys.argv[1] + '/out', to='tfrecord', progress=False);"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)


def test_conversions_do_not_import_pandas(tmp_path):
    """pyarrow imports pandas (tens of MiB, tenths of a second) from ``Array.to_numpy`` and
    ``pa.array`` when it is installed; our Arrow conversions go through buffers and never do.
    (The loaders' text columns are the exception, left out here: they hand Python ``str`` objects
    to a training loop, which pyarrow's C conversion makes fastest, and it imports pandas to do it;
    a training process pays that once.)"""
    (tmp_path / "d.csv").write_text("a,b,c,d\n1,2.5,x,true\n3,,y,false\n")
    (tmp_path / "t.txt").write_text("one\ntwo\n")
    code = (
        "import sys, importlib.util\n"
        "assert importlib.util.find_spec('pandas') is not None, 'pandas not installed: nothing to check'\n"
        "import lovecraft_convert as lc\n"
        "d = sys.argv[1]\n"
        "for fmt in ('parquet', 'hdf5', 'tfrecord'):\n"
        "    lc.convert(d + '/d.csv', d + '/o-' + fmt, to=fmt, progress=False)\n"
        "    lc.verify(d + '/o-' + fmt)\n"
        "    lc.verify(d + '/o-' + fmt, against=[d + '/d.csv'])\n"
        "    lc.inspect(d + '/o-' + fmt)\n"
        "lc.shard(d + '/t.txt', d + '/s', to='parquet', num_shards=2, workers=1, progress=False)\n"
        "lc.inspect(d + '/d.csv')\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)


def test_parquet_inputs_do_not_import_pandas(tmp_path):
    """Parquet columns of numbers (with and without nulls), fixed-size lists, lists and binary are
    converted from their Arrow buffers: a shard worker used to import pandas (~1.5 s) for them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "i": pa.array([1, 2, 3], pa.int64()),
            "f": pa.array([0.5, None, 2.0]),
            "v": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], pa.float32()), 2),
            "s": pa.array([[1], [], [2, 3]], pa.list_(pa.int32())),
            "b": pa.array([b"x", b"", b"yz"]),
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    code = (
        "import sys, importlib.util\n"
        "assert importlib.util.find_spec('pandas') is not None, 'pandas not installed: nothing to check'\n"
        "import lovecraft_convert as lc\n"
        "d = sys.argv[1]\n"
        "for fmt in ('parquet', 'mds', 'litdata', 'webdataset'):\n"
        "    lc.convert(d + '/d.parquet', d + '/o-' + fmt, to=fmt, progress=False)\n"
        "    assert lc.verify(d + '/o-' + fmt).ok\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)


def test_dir_lists_the_lazy_api():
    """``dir(lovecraft_convert)`` (and so editors and ``help()``) lists ``open_dataset`` and every
    name of ``__all__``, each of which resolves; listing them imports nothing heavy."""
    code = (
        "import sys, lovecraft_convert as lc;"
        "names = dir(lc);"
        "missing = [n for n in lc.__all__ if n not in names];"
        "heavy = [m for m in ('h5py', 'pyarrow', 'numpy') if m in sys.modules];"
        "print(missing, heavy, 'open_dataset' in names)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] [] True"
    import lovecraft_convert as lc

    assert all(getattr(lc, n) is not None for n in lc.__all__)


def test_help_names_every_input_kind_and_output_format():
    from lovecraft_convert.formats import names as formats
    from lovecraft_convert.inputs import names as kinds
    from lovecraft_convert.inputs.kinds import HELP as KIND_HELP

    out = subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", "--help"], capture_output=True, text=True, check=True
    ).stdout
    text = " ".join(out.split())
    inputs = text[text.index("Inputs") : text.index("Outputs")]
    for kind in kinds():  # each kind with its help line (the registry's, so a new kind is listed)
        assert f"{kind} {KIND_HELP[kind]}" in inputs, kind
    outputs = text[text.index("Outputs") :]
    for fmt in formats():
        assert fmt in outputs, fmt
