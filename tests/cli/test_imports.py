"""The CLI is a skin: importing it pulls in none of the heavy libraries."""

from __future__ import annotations

import subprocess
import sys


def test_cli_import_is_light():
    code = (
        "import sys, lovecraft_convert.cli, lovecraft_convert;"
        "heavy = [m for m in ('tensorflow', 'h5py', 'pyarrow', 'torch', 'polars', 'numpy', 'matplotlib') if m in sys.modules];"
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
