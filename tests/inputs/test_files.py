"""Files input: a folder tree (ImageFolder class folders, PNG and JPEG of several sizes and modes,
made with Pillow here) and a sidecar CSV, converted to every format and read back with np.load,
h5py, pyarrow and tf.data: one row per file in the tree's order, bytes equal to the files, labels
from the class folders (named in the manifest), sidecar columns joined by path or stem; parts for
workers give the same bytes whatever ``--workers``; what cannot be read is one line."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.inputs.filetrees import CLASSES, ORDER, make_images, make_sidecar
from tests.readback import disk_digest, manifest, read_back

pytest.importorskip("PIL")


def _bytes(v) -> bytes:
    return v if isinstance(v, bytes) else np.asarray(v, dtype=np.uint8).tobytes()


def _text(v) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


@pytest.fixture
def tree(tmp_path):
    root = str(tmp_path / "imgs")
    files = make_images(root)
    meta = make_sidecar(str(tmp_path / "meta.csv"), ORDER)
    return root, files, meta, str(tmp_path / "meta.csv")


FORMATS = ["memmap", "hdf5", "parquet", "tfrecord"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_file_a_row_with_its_bytes_label_and_sidecar(tmp_path, tree, fmt):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    root, files, meta, meta_path = tree
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", fmt, "--metadata", meta_path, "-q")
    assert r.exit_code == 0, r.stderr
    cols = read_back(out, fmt)
    assert [_text(p) for p in cols["path"]] == ORDER
    assert [_bytes(b) for b in cols["bytes"]] == [files[p] for p in ORDER]
    assert np.asarray(cols["label"]).tolist() == [CLASSES.index(p.split("/")[0]) for p in ORDER]
    assert [_text(c) for c in cols["caption"]] == [meta[p][0] for p in ORDER]
    assert [_text(s) for s in cols["split"]] == [meta[p][1] for p in ORDER]
    m = manifest(out)
    assert m["labels"] == {"column": "label", "names": CLASSES, "from": "top-level folder"}
    assert [f["name"] for f in m["schema"]] == ["path", "bytes", "label", "caption", "split"]
    (src,) = m["sources"]
    assert (src["format"], src["files"], src["size"]) == ("files", len(files), sum(map(len, files.values())))
    r = lovecraft("verify", out, "--against", root)  # the source read again with the manifest's options
    assert r.exit_code == 0, r.stdout + r.stderr


def test_columns_without_bytes_read_no_file(tmp_path, tree):
    """--columns label,path lists the tree and reads nothing: a file too large to read is no error."""
    root, files, _, _ = tree
    with open(os.path.join(root, "cat", "zzz.bin"), "wb") as f:
        f.write(b"\0" * (2 << 20))  # more than 16 MiB / 16: refused if it were read
    out = str(tmp_path / "out")
    lc.convert(root, out, to="parquet", columns=["label", "path"], max_memory="16MiB", progress=False)
    cols = read_back(out, "parquet")
    assert list(cols) == ["label", "path"]
    assert cols["path"] == [*ORDER[:6], "cat/zzz.bin", *ORDER[6:]]


def test_a_glob_of_files(tmp_path, tree):
    """Files named by a glob: paths relative to their common folder, labels from its subfolders."""
    root, files, _, _ = tree
    out = str(tmp_path / "out")
    r = lovecraft("convert", os.path.join(root, "*", "*.png"), "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    cols = read_back(out, "parquet")
    pngs = sorted(p for p in ORDER if p.endswith(".png") and p.count("/") == 1)
    assert cols["path"] == pngs
    assert cols["bytes"] == [files[p] for p in pngs]
    assert cols["label"].tolist() == [sorted({p.split("/")[0] for p in pngs}).index(p.split("/")[0]) for p in pngs]


def test_flat_folder_has_no_label_and_hidden_files_are_left_out(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in [("b.txt", "bee"), ("a.md", "ay"), (".hidden", "no"), ("c.bin", "\x00\x01")]:
        (root / name).write_bytes(text.encode())
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_bytes(b"ref")
    out = str(tmp_path / "out")
    lc.convert(str(root), out, to="parquet", input_format="files", progress=False)  # .txt: named, else text
    cols = read_back(out, "parquet")
    assert list(cols) == ["path", "bytes"]
    assert cols["path"] == ["a.md", "b.txt", "c.bin"]
    assert cols["bytes"] == [b"ay", b"bee", b"\x00\x01"]
    assert "labels" not in manifest(out)


def test_loose_files_beside_class_folders_get_label_minus_one(tmp_path, tree):
    root, _, _, _ = tree
    with open(os.path.join(root, "notes.txt"), "wb") as f:
        f.write(b"loose")
    out = str(tmp_path / "out")
    lc.convert(root, out, to="parquet", progress=False)
    cols = read_back(out, "parquet")
    assert cols["path"] == [*ORDER, "notes.txt"]  # the root's entries sorted: bird, cat, dog, notes.txt
    assert cols["label"].tolist() == [CLASSES.index(p.split("/")[0]) for p in ORDER] + [-1]


@pytest.mark.parametrize("fmt", ["memmap", "parquet"])
def test_shard_shuffled_with_two_workers_writes_the_bytes_of_one(tmp_path, tree, fmt):
    root, files, _, meta_path = tree
    outs = []
    for workers in (1, 2):
        out = str(tmp_path / f"w{workers}")
        lc.shard(
            root, out, to=fmt, num_shards=3, shuffle=True, seed=11, workers=workers, part_bytes=4096,
            metadata=meta_path, progress=False,
        )  # fmt: skip
        outs.append(out)
    assert disk_digest(outs[0]) == disk_digest(outs[1])
    m = manifest(outs[0])
    assert m["rows"] == len(files) and len(m["shards"]) == 3
    if fmt == "parquet":  # pyarrow reads the shards in order
        cols = read_back(outs[0], fmt)
        got = list(zip(cols["path"], cols["bytes"], strict=True))
        assert sorted(got) == sorted((p, files[p]) for p in ORDER)
        assert [p for p, _ in got] != ORDER  # shuffled


def test_parts_are_file_ranges_starting_at_a_path(tmp_path, tree):
    root, files, _, _ = tree
    from lovecraft_convert.inputs import open_reader

    reader = open_reader([root], budget=64 << 20)
    parts = reader.partitions(4096)
    assert len(parts) > 2
    rows = []
    for p in parts:
        for b in reader.part_batches(p):
            rows += b.columns["path"].to_pylist("string")
    assert rows == ORDER
    # every part but the first starts where the one before stopped
    assert all(a.stop == b.first for a, b in zip(parts, parts[1:], strict=False))


def test_the_sidecar_inside_the_tree_is_no_row(tmp_path, tree):
    root, _, _, meta_path = tree
    inside = os.path.join(root, "metadata.csv")
    shutil.copy(meta_path, inside)
    out = str(tmp_path / "out")
    lc.convert(root, out, to="parquet", metadata=inside, progress=False)
    assert read_back(out, "parquet")["path"] == ORDER


def test_a_large_sidecar_is_joined_a_window_at_a_time(tmp_path, tree):
    """A sidecar larger than 1/16 of --max-memory is not held whole: each window of files looks its
    rows up in a pass of its own; the rows are those of the whole join."""
    root, _, meta, meta_path = tree
    big = str(tmp_path / "big.csv")
    with open(meta_path, encoding="utf-8") as f, open(big, "w", encoding="utf-8") as g:
        g.write(f.read())
        for k in range(40000):  # rows for files that are not there: 1.6 MB, more than 16 MiB / 16
            g.write(f'other/{k:06d}.jpg,"{"x" * 20} {k}",train\n')
    assert os.path.getsize(big) > (16 << 20) // 16
    out = str(tmp_path / "out")
    lc.convert(root, out, to="parquet", metadata=big, max_memory="16MiB", progress=False)
    cols = read_back(out, "parquet")
    assert cols["caption"] == [meta[p][0] for p in ORDER]


def test_a_file_without_a_sidecar_row(tmp_path, tree):
    root, _, _, meta_path = tree
    with open(meta_path, encoding="utf-8") as f:
        lines = [ln for ln in f if not ln.startswith("cat/001")]
    short = str(tmp_path / "short.csv")
    with open(short, "w", encoding="utf-8") as f:
        f.writelines(lines)
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", "parquet", "--metadata", short, "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}/cat/001.png: no row in --metadata {short} (looked up as cat/001.png, cat/001, 001.png, 001); "
        "fix or remove it, or pass --on-bad-file skip to leave such files out (counted)\n",
    )
    assert not os.path.exists(out)
    r = lovecraft("convert", root, "-o", out, "--to", "parquet", "--metadata", short, "--on-bad-file", "skip")
    assert r.exit_code == 0, r.stderr
    assert read_back(out, "parquet")["path"] == [p for p in ORDER if p != "cat/001.png"]
    m = manifest(out)
    assert m["skipped_files"]["count"] == 1 and m["skipped_files"]["by_reason"] == {"metadata": 1}
    assert f"note: skipped 1 file (--on-bad-file skip): {root}/cat/001.png (no row in --metadata" in r.stderr


def test_a_sidecar_row_is_one_files(tmp_path):
    """A file with no row of its own took another file's by a shorter key (dog/001.jpg took the row
    of the root's 001.jpg), and one stem row was copied to every file of that stem in any folder,
    exit 0 both times. A shorter key that is another file's path is that file's; a row two files
    would take is refused, naming both."""
    root = tmp_path / "tree"
    for rel in ("001.jpg", "cat/001.jpg", "dog/001.jpg", "dog/002.jpg"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode())
    paths = tmp_path / "paths.csv"
    paths.write_text("file_name,caption\n001.jpg,root\ncat/001.jpg,a cat\ndog/002.jpg,dog two\n")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(root), "-o", out, "--to", "parquet", "--metadata", str(paths), "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}/dog/001.jpg: no row in --metadata {paths} (looked up as dog/001.jpg, dog/001, 001.jpg, 001); "
        "fix or remove it, or pass --on-bad-file skip to leave such files out (counted)\n",
    )
    r = lovecraft("convert", str(root), "-o", out, "--to", "parquet", "--metadata", str(paths), "--on-bad-file", "skip",
                  "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "parquet")
    assert list(zip(got["path"], got["caption"], strict=True)) == [
        ("001.jpg", "root"), ("cat/001.jpg", "a cat"), ("dog/002.jpg", "dog two")
    ]  # fmt: skip
    stems = tmp_path / "stems.csv"
    stems.write_text("file_name,caption\n001,one\n002,two\n")
    r = lovecraft("convert", str(root), "-o", str(tmp_path / "s"), "--to", "parquet", "--metadata", str(stems), "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --metadata {stems}: the row keyed '001' matches both {root}/001.jpg and {root}/cat/001.jpg; key the sidecar by "
        "each file's relative path (cat/001.jpg), or give each a row\n",
    )
    assert not os.path.exists(tmp_path / "s")
    shutil.rmtree(root / "cat")
    shutil.rmtree(root / "dog")
    (root / "002.jpg").write_bytes(b"2")
    r = lovecraft("convert", str(root), "-o", str(tmp_path / "u"), "--to", "parquet", "--metadata", str(stems), "-q")
    assert r.exit_code == 0, r.stderr  # stems that name one file each: joined
    assert read_back(str(tmp_path / "u"), "parquet")["caption"] == ["one", "two"]


def test_a_key_twice_in_the_sidecar(tmp_path, tree):
    root, _, _, meta_path = tree
    with open(meta_path, "a", encoding="utf-8") as f:
        f.write("cat/002,again,train\n")
    r = lovecraft("convert", root, "-o", str(tmp_path / "out"), "--to", "parquet", "--metadata", meta_path, "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --metadata {meta_path}, row 10: key 'cat/002' given twice; keep one row per file\n",
    )


def test_a_sidecar_without_a_key_column(tmp_path, tree):
    root, _, _, _ = tree
    bad = tmp_path / "m.csv"
    bad.write_text("name,caption\ncat/000.jpg,x\n")
    r = lovecraft("convert", root, "-o", str(tmp_path / "out"), "--to", "parquet", "--metadata", str(bad), "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: --metadata {bad}: no key column (columns are name, caption); "
        "name the column of file paths one of file_name, path, filename, file, key, __key__\n",
    )


def test_a_file_larger_than_its_share_of_the_budget(tmp_path):
    root = tmp_path / "big"
    root.mkdir()
    (root / "a.bin").write_bytes(b"a")
    (root / "b.bin").write_bytes(b"\x00" * (2 << 20))  # 2 MiB: more than 16 MiB / 16
    out = str(tmp_path / "out")
    r = lovecraft("convert", str(root), "-o", out, "--to", "parquet", "--max-memory", "16MiB", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}/b.bin: 2.0 MiB, more than the 1.0 MiB one file may take under --max-memory 16.0 MiB "
        "(1/16 of it); raise --max-memory to 32.0 MiB or more\n",
    )
    assert not os.path.exists(out)


def test_a_file_that_grew_after_the_listing_is_read_whole_or_refused(tmp_path, monkeypatch):
    """Sizes come from the listing; a file written to after it is read to its end (never cut at the
    listed size), and one that grew past its share of the budget is refused as a large one is."""
    from lovecraft_convert.errors import InputError
    from lovecraft_convert.inputs import open_reader
    from lovecraft_convert.inputs.files import FilesReader

    root = tmp_path / "grow"
    root.mkdir()
    (root / "a.bin").write_bytes(b"a" * 10)
    (root / "b.bin").write_bytes(b"b" * 10)
    listed = FilesReader._entries
    growth: dict[str, bytes] = {}

    def entries_then_growth(self, *args, **kwargs):
        got = list(listed(self, *args, **kwargs))  # the sizes as listed
        for name, more in growth.items():
            with open(root / name, "ab") as f:
                f.write(more)
        growth.clear()
        yield from got

    monkeypatch.setattr(FilesReader, "_entries", entries_then_growth)
    growth["a.bin"] = b"A" * 5000  # still under the 1 MiB one file may take
    reader = open_reader([str(root)], budget=16 << 20)
    got = [bytes(x) for b in reader.batches() for x in b.columns["bytes"].to_pylist("binary")]
    assert got == [b"a" * 10 + b"A" * 5000, b"b" * 10]
    growth["b.bin"] = b"B" * ((2 << 20) - 10)
    reader = open_reader([str(root)], budget=16 << 20)
    with pytest.raises(InputError) as e:
        list(reader.batches())
    assert e.value.one_line() == (
        f"{root}/b.bin: 2.0 MiB, more than the 1.0 MiB one file may take under max_memory 16.0 MiB (1/16 of it); "
        "raise max_memory to 32.0 MiB or more"
    )


def test_links_to_files_are_read_and_dangling_ones_left_out(tmp_path, tree):
    root, files, _, _ = tree
    os.unlink(os.path.join(root, "dog", "001.jpg"))
    os.symlink(os.path.join(root, "nowhere.jpg"), os.path.join(root, "dog", "001.jpg"))
    os.symlink(os.path.join(root, "cat", "000.jpg"), os.path.join(root, "dog", "002.jpg"))
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    cols = read_back(out, "parquet")
    assert "dog/001.jpg" not in cols["path"]  # not a regular file: left out of the listing
    assert cols["bytes"][cols["path"].index("dog/002.jpg")] == files["cat/000.jpg"]


def test_directories_holding_data_files_and_empty_ones(tmp_path):
    d = tmp_path / "tables"
    d.mkdir()
    (d / "a.csv").write_text("x\n1\n")
    r = lovecraft("convert", str(d), "-o", str(tmp_path / "o"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {d}: is a directory, not a file; pass the files inside it, e.g. a glob like dir/*.csv, "
        "or --input-format files to read each file as a row\n",
    )
    r = lovecraft("convert", str(d), "-o", str(tmp_path / "o"), "--to", "parquet", "--input-format", "files", "-q")
    assert r.exit_code == 0, r.stderr
    assert read_back(str(tmp_path / "o"), "parquet")["bytes"] == [b"x\n1\n"]
    e = tmp_path / "empty"
    e.mkdir()
    r = lovecraft("convert", str(e), "-o", str(tmp_path / "o2"), "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (1, f"Error: {e}: holds no files; check the path\n")


def test_files_flags_on_other_inputs_are_usage_errors(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("x\n1\n")
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--decode", "image", "-q")
    assert (r.exit_code, r.stderr) == (
        2,
        "Error: --decode applies to files and webdataset inputs only; or pass --input-format files\n",
    )
    r = lovecraft("convert", str(src), "-o", str(tmp_path / "o"), "--to", "parquet", "--image-size", "4x4", "-q")
    assert (r.exit_code, r.stderr) == (2, "Error: --image-size goes with --decode image\n")


def test_the_manifest_records_the_listing(tmp_path, tree):
    """A changed file changes the source's listing digest: --resume of an unfinished run refuses it."""
    root, _, _, _ = tree
    out = str(tmp_path / "out")
    lc.convert(root, out, to="parquet", progress=False)
    before = manifest(out)["sources"][0]
    with open(os.path.join(root, "cat", "002.png"), "ab") as f:
        f.write(b"more")
    lc.convert(root, out, to="parquet", overwrite=True, progress=False)
    after = manifest(out)["sources"][0]
    assert before["listing_sha256"] != after["listing_sha256"]
    assert after["size"] == before["size"] + 4
    assert json.dumps(after)  # plain JSON


def test_resume_refuses_a_tree_whose_file_was_rewritten_at_the_same_size(tmp_path, tree):
    """A file rewritten in place, same size, new modification time: the listing digest holds each
    file's modification time, so --resume refuses the tree, naming what changed (it said
    "already complete, made by the same command and inputs", over shards of the old bytes)."""
    root, _, _, _ = tree
    out = str(tmp_path / "out")
    args = ("shard", root, "-o", out, "--to", "webdataset", "--num-shards", "2")
    assert lovecraft(*args, "-q").exit_code == 0
    victim = os.path.join(root, "cat", "001.png")
    with open(victim, "r+b") as f:
        data = f.read()
        f.seek(0)
        f.write(bytes(255 - b for b in data[:8]) + data[8:])  # same size
    st = os.stat(victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    r = lovecraft(*args, "--resume")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {out}: a finished dataset is there, but {root} changed since it was made (a file was added, "
        "removed, resized or rewritten); run the same command as before, or pass --overwrite to replace it\n",
    )


def test_a_sidecar_column_whose_type_widens_late(tmp_path, tree):
    """A sidecar column read as integers for its first megabytes and holding a fraction at the end
    is float64 in the output, convert and shard alike (the job starts over with the wider type)."""
    root, _, _, _ = tree
    meta = str(tmp_path / "wide.csv")
    with open(meta, "w", encoding="utf-8") as f:
        f.write("file_name,score\n")
        for k in range(150_000):  # 3.6 MB of integers for files that are not there
            f.write(f"other/{k:07d}.jpg,{k}\n")
        for k, rel in enumerate(ORDER):
            f.write(f"{rel},{k}.5\n")
    for job in ("convert", "shard"):
        out = str(tmp_path / job)
        kw = {"num_shards": 2, "workers": 2} if job == "shard" else {}
        getattr(lc, job)(root, out, to="parquet", metadata=meta, columns=["path", "score"], max_memory="16MiB",
                         progress=False, **kw)  # fmt: skip
        cols = read_back(out, "parquet")
        assert cols["path"] == ORDER
        assert cols["score"].tolist() == [k + 0.5 for k in range(len(ORDER))]


def test_shard_not_shuffled_reads_each_shards_files_in_its_unit(tmp_path, tree, monkeypatch):
    """Not shuffled, and with no file that could be left out, every file is a row: each shard's
    unit reads its own files from the trees (no spill phase) and writes the bytes the spilling path
    writes (``--on-bad-file skip`` keeps that path); shards cross from one tree to the next."""
    root, files, _, _ = tree
    second = str(tmp_path / "more")
    shutil.copytree(root, second)
    log = tmp_path / "units.jsonl"
    monkeypatch.setenv("LOVECRAFT_UNIT_LOG", str(log))
    outs, phases = {}, {}
    for mode in ("error", "skip"):
        out = str(tmp_path / mode)
        lc.shard([root, second], out, to="webdataset", num_shards=4, on_bad_file=mode, workers=2, progress=False)
        phases[mode] = {json.loads(line)["phase"] for line in log.read_text().splitlines()}
        log.unlink()
        outs[mode] = out
    assert phases == {"error": {2}, "skip": {1, 2}}
    assert disk_digest(outs["error"]) == disk_digest(outs["skip"])
    cols = read_back(outs["error"], "webdataset")
    assert [_text(p) for p in cols["path"]] == ORDER + ORDER  # 18 rows in shards of 5, 5, 4, 4
    assert [_bytes(b) for b in cols["bytes"]] == [files[p] for p in ORDER] * 2
    assert [s["rows"] for s in manifest(outs["error"])["shards"]] == [5, 5, 4, 4]


@pytest.mark.parametrize("fmt", ["mds", "webdataset", "parquet"])
@pytest.mark.parametrize("order", ["small first", "large first"])
def test_shard_size_holds_for_files_whose_sizes_vary_along_the_listing(tmp_path, fmt, order):
    """--shard-size on a tree whose first files are 10x smaller (or larger) than the rest: every
    shard but the last within 10% of the target. (A row count measured on the first files gave one
    shard of 5.2x the target, or shards of a tenth of it.) The same bytes with 1 and 2 workers, and
    after --resume of a run killed once a shard was written (the cut is kept in the run's plan)."""
    rng = np.random.default_rng(0)
    root = tmp_path / "tree"
    root.mkdir()
    sizes = [5_000] * 100 + [50_000] * 100
    if order == "large first":
        sizes.reverse()
    for i, n in enumerate(sizes):
        (root / f"f{i:03d}.bin").write_bytes(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    target = 1 << 20
    outs = []
    for workers in (1, 2):
        out = str(tmp_path / f"out{workers}")
        r = lovecraft("shard", str(root), "-o", out, "--to", fmt, "--shard-size", "1MiB", "--input-format", "files",
                      "--workers", str(workers), "-q")  # fmt: skip
        assert r.exit_code == 0, r.stderr
        outs.append(out)
    m = manifest(outs[0])
    per_shard = [sum(f["bytes"] for f in m["files"] if f["path"] in s["files"]) for s in m["shards"]]
    assert len(per_shard) >= 5
    assert all(abs(b - target) <= 0.1 * target for b in per_shard[:-1]), per_shard
    assert sum(s["rows"] for s in m["shards"]) == 200
    assert disk_digest(outs[0]) == disk_digest(outs[1])
    # killed once a shard is journalled, then resumed: the same shards
    import signal
    import subprocess
    import sys
    import time

    out = str(tmp_path / "killed")
    code = (f"import lovecraft_convert as lc; lc.shard([{str(root)!r}], {out!r}, to={fmt!r}, shard_size='1MiB', "
            "input_format='files', workers=1, progress=False)")  # fmt: skip
    p = subprocess.Popen([sys.executable, "-c", code])
    journal = tmp_path / ".killed.partial" / "journal.jsonl"
    t0 = time.time()
    while (
        p.poll() is None and time.time() - t0 < 60 and not (journal.exists() and journal.read_text().count("\n") >= 2)
    ):
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()
    if not os.path.exists(out):
        r = lovecraft("shard", str(root), "-o", out, "--to", fmt, "--shard-size", "1MiB", "--input-format", "files",
                      "--workers", "1", "--resume", "-q")  # fmt: skip
        assert r.exit_code == 0, r.stderr
    assert disk_digest(out) == disk_digest(outs[0])


def test_a_tree_that_changed_since_the_run_was_planned_is_one_line(tmp_path, tree):
    """A shard's unit reads the files between its mark and the next shard's: a file added or
    removed there since the marks were taken is an error naming the tree, not rows shifted into
    the next shard or lost."""
    from lovecraft_convert.errors import InputError
    from lovecraft_convert.inputs import open_reader

    root, _, _, _ = tree
    reader = open_reader([root], budget=64 << 20)
    assert reader.random_rows
    marks = reader.row_marks([0, 3, 9])
    assert marks == [(0, ("bird", "a", "000.jpg")), (0, ("cat", "001.png")), None]

    def paths(start, stop, mark):
        return [p for b in reader.row_range(start, stop, 1 << 20, mark) for p in b.columns["path"].to_pylist("string")]

    assert paths(3, 9, (marks[1], marks[2])) == ORDER[3:]
    assert paths(0, 3, None) == ORDER[:3]
    added = os.path.join(root, "cat", "001a.png")
    shutil.copy(os.path.join(root, "cat", "001.png"), added)
    with pytest.raises(InputError, match=r"cat/001\.png: the files listed from here are not those listed"):
        paths(3, 9, (marks[1], marks[2]))
    os.unlink(added)
    os.unlink(os.path.join(root, "dog", "010.png"))  # the last of the range
    with pytest.raises(InputError, match="the tree changed while it was read"):
        paths(3, 9, (marks[1], marks[2]))
    os.unlink(os.path.join(root, "cat", "001.png"))  # the range's first file
    with pytest.raises(InputError, match="the tree changed while it was read"):
        paths(3, 8, (marks[1], None))


def test_column_type_applies_to_the_sidecar_and_is_refused_elsewhere(tmp_path, tree):
    """--column-type types the sidecar's columns (by name or pattern); one naming a column of the
    files themselves (other than narrowing to float16) or no column at all was silently ignored."""
    pq = pytest.importorskip("pyarrow.parquet")
    root, _files, _meta, _ = tree
    meta = tmp_path / "scores.csv"
    meta.write_text("file_name,score\n" + "".join(f"{rel},{k}\n" for k, rel in enumerate(ORDER)), encoding="utf-8")
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", "parquet", "--metadata", str(meta), "--column-type", "sc*=float32", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    t = pq.read_table(out)
    assert str(t.schema.field("score").type) == "float" and t["score"].to_pylist() == list(range(len(ORDER)))
    cases = [
        (["--column-type", "label=int32"],
         f"Error: --column-type label=int32: 'label' is a column of the files input {root} itself, whose type is "
         "fixed; only float16 narrows it; --column-type types the columns of a --metadata sidecar\n"),
        (["--column-type", "nosuch=int64"],
         f"Error: --column-type nosuch=...: no column 'nosuch' in the files input {root} (columns path, bytes, "
         "label); --column-type types the columns of a --metadata sidecar\n"),
        (["--metadata", str(meta), "--column-type", "nosuch=int64"],
         f"Error: --column-type nosuch=...: no column 'nosuch' in --metadata {meta}; its columns are file_name, "
         "score\n"),
    ]  # fmt: skip
    for args, message in cases:
        r = lovecraft("convert", root, "-o", str(tmp_path / "bad"), "--to", "parquet", *args, "-q")
        assert (r.exit_code, r.stderr) == (1, message)
        assert not os.path.exists(tmp_path / "bad")


def test_a_name_that_is_not_utf8_is_one_line_showing_its_byte(tmp_path):
    """The name as `ls -b` shows it (caf\\xe9.txt, not Python's caf\\udce9.txt), and nothing after
    that line: the Parquet writer the run aborted is not closed again at exit (pyarrow's __del__
    printed "Exception ignored ... file metadata is only available after writer close")."""
    import subprocess
    import sys

    d = tmp_path / "in"
    d.mkdir()
    try:
        with open(os.path.join(os.fsencode(d), b"caf\xe9.txt"), "wb") as f:
            f.write(b"hello")
    except OSError as e:  # a filesystem that takes UTF-8 names only
        pytest.skip(f"cannot make a file whose name is not UTF-8 here: {e}")
    (d / "ok.txt").write_bytes(b"world")
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "lovecraft_convert", "convert", str(d), "-o", str(out), "--to", "parquet"]
        + ["--input-format", "files", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert r.stderr == (
        f"Error: {d}/caf\\xe9.txt: its name is not valid UTF-8; fix or remove it, or pass --on-bad-file skip "
        "to leave such files out (counted)\n"
    )
    assert not out.exists()
    # the way out the line gives works, for inspect too; the name spelled as the line spells it
    base = [sys.executable, "-m", "lovecraft_convert"]
    cmd = [*base, "inspect", str(d), "--input-format", "files", "--on-bad-file", "skip"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"skipped 1 file (--on-bad-file skip): {d}/caf\\xe9.txt (its name is not valid UTF-8)\n" in r.stdout
    r = subprocess.run(
        [*base, "convert", str(d), "-o", str(out), "--to", "parquet", "--input-format", "files", "-q"]
        + ["--on-bad-file", "skip"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    text = (out / "_manifest.json").read_text(encoding="utf-8")
    assert "\\udc" not in text  # no lone surrogate: strict JSON readers take it
    assert manifest(str(out))["skipped_files"]["first"] == [[f"{d}/caf\\xe9.txt", "its name is not valid UTF-8"]]


def test_a_class_folder_that_is_a_link_is_a_class(tmp_path):
    """train/dog linked to a folder elsewhere (a split built of links): its files and its class
    were left out with exit 0, where torchvision's ImageFolder follows the link."""
    train, elsewhere = tmp_path / "train", tmp_path / "pool" / "dogs"
    (train / "cat").mkdir(parents=True)
    elsewhere.mkdir(parents=True)
    for i in range(2):
        (train / "cat" / f"{i}.jpg").write_bytes(b"c%d" % i)
    for i in range(3):
        (elsewhere / f"{i}.jpg").write_bytes(b"d%d" % i)
    os.symlink(elsewhere, train / "dog")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(train), "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "parquet")
    assert got["path"] == ["cat/0.jpg", "cat/1.jpg", "dog/0.jpg", "dog/1.jpg", "dog/2.jpg"]
    assert list(got["label"]) == [0, 0, 1, 1, 1] and manifest(out)["labels"]["names"] == ["cat", "dog"]
    assert list(got["bytes"])[2:] == [b"d0", b"d1", b"d2"]


def test_when_every_file_is_skipped_the_line_says_so(tmp_path):
    """--on-bad-file skip leaving out every file ended in "empty input (no records)" or "holds no
    files": the line says every file was skipped, and why (convert and shard alike)."""
    root = tmp_path / "tree"
    (root / "cat").mkdir(parents=True)
    for i in range(2):
        (root / "cat" / f"{i}.jpg").write_bytes(b"x")
    meta = tmp_path / "meta.csv"
    meta.write_text("file_name,caption\ntrain/cat/0.jpg,a\ntrain/cat/1.jpg,b\n")
    why = (
        f"{root}/cat/0.jpg (no row in --metadata {meta} (looked up as cat/0.jpg, cat/0, 0.jpg, 0)), "
        f"{root}/cat/1.jpg (no row in --metadata {meta} (looked up as cat/1.jpg, cat/1, 1.jpg, 1))"
    )
    for cmd in (["convert"], ["shard", "--num-shards", "2"]):
        r = lovecraft(cmd[0], str(root), "-o", str(tmp_path / "o"), "--to", "parquet", *cmd[1:], "--metadata",
                      str(meta), "--on-bad-file", "skip", "-q")  # fmt: skip
        assert (r.exit_code, r.stderr) == (
            1,
            f"Error: {root}: all 2 files were skipped (--on-bad-file skip): {why}; check the files\n",
        ), cmd
    r = lovecraft("convert", str(root), "-o", str(tmp_path / "d"), "--to", "hdf5", "--decode", "image",
                  "--on-bad-file", "skip", "-q")  # fmt: skip
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}: no file decodes as an image: {root}/cat/0.jpg (not an image (no format Pillow reads)), ...; "
        "check the files and --decode\n",
    )


def test_a_class_folder_without_a_file_keeps_its_label_and_is_noted(tmp_path):
    """An empty class folder (or one holding only hidden files) took a label silently; it keeps it
    (so that train and val, one of which lacks the class, agree), and a note says so."""
    root = tmp_path / "val"
    for c in ("ant", "bee", "cat"):
        (root / c).mkdir(parents=True)
    (root / "ant" / "0.jpg").write_bytes(b"a")
    (root / "bee" / ".DS_Store").write_bytes(b"")
    (root / "cat" / "0.jpg").write_bytes(b"c")
    out = str(tmp_path / "o")
    r = lovecraft("convert", str(root), "-o", out, "--to", "parquet", "-q")
    assert r.exit_code == 0
    assert (
        r.stderr
        == "note: class folders without a file keep their labels (so that splits agree), with no rows: 'bee' (label 1)\n"
    )
    assert list(read_back(out, "parquet")["label"]) == [0, 2]
    assert manifest(out)["labels"]["names"] == ["ant", "bee", "cat"]
