"""Outputs that would destroy an input, or that the commit could not put in place, are refused
before any work with one line (issue 38, points 2 and 7): paths are compared as the file system
sees them (symbolic links resolved, bind mounts by device and inode), and a symbolic link or a
mount point at the output path is refused instead of failing at the commit."""

from __future__ import annotations

import os
import subprocess

import pytest

import lovecraft_convert as lc
from tests.conftest import leftovers, lovecraft
from tests.readback import manifest

COMMANDS = {
    "convert": ["--to", "parquet"],
    "shard": ["--to", "parquet", "--num-shards", "2", "--workers", "1"],
    "bucket": ["--to", "memmap", "--ragged", "--num-buckets", "2", "--workers", "1"],
}


def _src(directory, name: str = "data.txt"):
    """Lines of 1 to 9 numbers: text ``bucket`` reads as sequences."""
    os.makedirs(directory, exist_ok=True)
    p = directory / name
    p.write_text("".join(",".join(map(str, range(1 + i % 9))) + "\n" for i in range(200)))
    return p


def _csv(directory, name: str = "data.csv"):
    os.makedirs(directory, exist_ok=True)
    p = directory / name
    p.write_text("a,b\n" + "".join(f"{i},{i % 7}\n" for i in range(200)))
    return p


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_named_through_a_link_to_the_inputs_directory_is_refused(tmp_path, command):
    """``-o alias/D --overwrite``, ``alias`` a link to the directory holding ``D``, the input's own
    directory: the output is ``D``, which the overwrite would delete with the input in it."""
    src = (_csv if command != "bucket" else _src)(tmp_path / "x" / "D")
    before = src.read_bytes()
    os.symlink("x", tmp_path / "alias")
    out = tmp_path / "alias" / "D"
    r = lovecraft(command, str(src), "-o", str(out), *COMMANDS[command], "--overwrite", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: the output would replace the input {src} ({out} is {tmp_path / 'x' / 'D'}); "
        "choose another output directory\n",
    )
    assert src.read_bytes() == before and sorted(os.listdir(tmp_path / "x" / "D")) == [src.name]
    assert leftovers(tmp_path / "x") == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_inside_the_input_dataset_is_refused(tmp_path, command):
    """``convert ds/ -o ds/inner``: a directory the input dataset's manifest does not list would
    make the input fail verify. Refused, with or without --overwrite; the input still verifies."""
    ds = str(tmp_path / "ds")
    lc.convert([str((_csv if command != "bucket" else _src)(tmp_path))], ds, to="parquet", progress=False)
    for extra in ([], ["--overwrite"]):
        out = os.path.join(ds, "inner")
        r = lovecraft(command, ds, "-o", out, *COMMANDS[command], *extra, "-q")
        assert (r.exit_code, r.stderr) == (
            1,
            f"Error: {out}: the output would be inside the input {ds}; choose an output directory outside it\n",
        )
    assert sorted(os.listdir(ds)) == ["_manifest.json", "data.parquet"]
    assert lc.verify(ds).lines() == []


def test_an_output_holding_the_input_dataset_through_a_link_is_refused(tmp_path):
    """The output's real path holds the input dataset, named through a link to its parent."""
    ds = tmp_path / "real" / "ds"
    lc.convert([str(_csv(tmp_path))], str(ds), to="parquet", progress=False)
    os.symlink(tmp_path / "real", tmp_path / "alias")
    out = tmp_path / "alias"
    r = lovecraft("convert", str(ds), "-o", str(out), "--to", "hdf5", "--overwrite", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: the output would replace the input {ds} ({out} is {tmp_path / 'real'}); "
        "choose another output directory\n",
    )
    assert lc.verify(str(ds)).lines() == []


@pytest.fixture
def bind_mount(tmp_path):
    """``mount(src, dst)`` bind-mounts ``src`` at ``dst`` (unmounted after the test); skips where
    bind mounts cannot be made (not root, no mount namespace)."""
    made = []

    def mount(src, dst) -> None:
        os.makedirs(src, exist_ok=True)
        os.makedirs(dst, exist_ok=True)
        r = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {r.stderr.strip()}")
        made.append(str(dst))

    yield mount
    for d in reversed(made):
        subprocess.run(["umount", d], check=True)


def test_an_input_dataset_seen_through_a_bind_mount_is_recognised(tmp_path, bind_mount):
    """The same directory at two places (a bind mount): no link to resolve, the device and inode
    tell. An output inside the input dataset's other name is refused."""
    ds = tmp_path / "a" / "ds"
    lc.convert([str(_csv(tmp_path))], str(ds), to="parquet", progress=False)
    bind_mount(tmp_path / "a", tmp_path / "b")
    out = tmp_path / "b" / "ds" / "inner"
    r = lovecraft("convert", str(ds), "-o", str(out), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: the output would be inside the input {ds}; choose an output directory outside it\n",
    )
    r = lovecraft(
        "convert", str(ds / "data.parquet"), "-o", str(tmp_path / "b" / "ds"), "--to", "hdf5", "--overwrite", "-q"
    )
    assert r.exit_code == 1 and r.stderr.startswith(
        f"Error: {tmp_path / 'b' / 'ds'}: the output would replace the input {ds / 'data.parquet'}"
    )
    assert lc.verify(str(ds)).lines() == []


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs mounted at ``tmp_path/mnt`` holding a dataset; skips where it cannot be mounted."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_mount_point_output_is_refused_before_the_work(tmp_path, tmpfs, command):
    """A mount point cannot be renamed: ``--overwrite`` of one failed at the commit with EBUSY
    and a traceback. Refused up front (with or without --overwrite), the mounted file system
    untouched and nothing left beside it."""
    src = (_csv if command != "bucket" else _src)(tmp_path / "in")
    lc.convert([str(_csv(tmp_path / "first"))], str(tmpfs / "ds"), to="parquet", progress=False)
    for extra in (["--overwrite"], []):
        r = lovecraft(command, str(src), "-o", str(tmpfs), *COMMANDS[command], *extra, "-q")
        assert (r.exit_code, r.stderr) == (
            1,
            f"Error: {tmpfs}: is a mount point, which the output cannot replace (it is renamed into place); "
            f"write into a directory inside it (e.g. {tmpfs}/dataset) or choose another path\n",
        )
    assert sorted(os.listdir(tmpfs)) == ["ds"] and lc.verify(str(tmpfs / "ds")).lines() == []
    assert leftovers(tmp_path) == []


def test_a_bind_mount_output_is_refused(tmp_path, bind_mount):
    """A bind mount of a directory of the same file system is a mount point that ``os.path.ismount``
    does not see (same device): the kernel's mount table does."""
    bind_mount(tmp_path / "a", tmp_path / "b")
    r = lovecraft("convert", str(_csv(tmp_path / "in")), "-o", str(tmp_path / "b"), "--to", "hdf5", "--overwrite", "-q")
    assert r.exit_code == 1 and r.stderr.startswith(f"Error: {tmp_path / 'b'}: is a mount point")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_dangling_link_output_is_refused_before_the_work(tmp_path, command):
    """A link to nothing: the run used to do all its work, then fail at the commit with a
    traceback (NotADirectoryError)."""
    src = (_csv if command != "bucket" else _src)(tmp_path / "in")
    os.symlink(tmp_path / "nowhere", tmp_path / "out")
    r = lovecraft(command, str(src), "-o", str(tmp_path / "out"), *COMMANDS[command], "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path / 'out'}: is a symbolic link (to {tmp_path / 'nowhere'}), which the output cannot "
        "replace; name the directory itself, or remove the link\n",
    )
    assert os.readlink(tmp_path / "out") == str(tmp_path / "nowhere") and leftovers(tmp_path) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_link_to_a_dataset_is_refused_and_nothing_is_left(tmp_path, command):
    """``-o link --overwrite``, the link naming a dataset: the commit used to move the link aside as
    ``.link.old-PID`` (never removed) and put a directory in its place. Refused; the link and the
    dataset it names are as they were."""
    src = (_csv if command != "bucket" else _src)(tmp_path / "in")
    target = tmp_path / "target"
    lc.convert([str(_csv(tmp_path / "first"))], str(target), to="parquet", progress=False)
    os.symlink(target, tmp_path / "link")
    r = lovecraft(command, str(src), "-o", str(tmp_path / "link"), *COMMANDS[command], "--overwrite", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {tmp_path / 'link'}: is a symbolic link (to {target}), which the output cannot replace; "
        "name the directory itself, or remove the link\n",
    )
    assert os.readlink(tmp_path / "link") == str(target) and manifest(str(target))["command"] == "convert"
    assert leftovers(tmp_path) == []


def test_a_failed_rename_at_the_commit_is_one_line_and_keeps_the_old_output(tmp_path, monkeypatch):
    """Whatever the up-front checks cannot foresee (the output made a mount point during the run):
    the rename's error is one line, and the old output is put back."""
    import errno

    from lovecraft_convert.engine import commit

    out = tmp_path / "out"
    lc.convert([str(_csv(tmp_path / "first"))], str(out), to="parquet", progress=False)
    before = manifest(str(out))
    real = os.rename

    def rename(src, dst, *args, **kwargs):
        if str(dst) == str(out) and os.path.basename(src).startswith(".out.tmp-"):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src), None, str(dst))
        return real(src, dst, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(commit.os, "rename", rename)
        r = lovecraft("convert", str(_csv(tmp_path / "in")), "-o", str(out), "--to", "hdf5", "--overwrite", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: cannot put the output in place (Device or resource busy); nothing was written; "
        "choose another output path\n",
    )
    assert manifest(str(out)) == before and leftovers(tmp_path) == []
