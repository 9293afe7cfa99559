"""An object-store output that is, holds or lies inside one of its inputs is refused before any
work (issue 38, point 2): the commit deletes every object under the output's prefix that its
manifest does not name, inputs included; and a prefix holding objects that are not a dataset's is
refused as an existing output is."""

from __future__ import annotations

import pytest

import lovecraft_convert as lc

from ..conftest import lovecraft
from .conftest import objects


@pytest.fixture
def dataset(s3, bucket, tmp_path) -> str:
    src = tmp_path / "in.csv"
    src.write_text("a,b\n" + "".join(f"{i},{i % 7}\n" for i in range(300)))
    uri = f"s3://{bucket}/ds"
    lc.convert([str(src)], uri, to="parquet", progress=False)
    return uri


@pytest.mark.parametrize("command", ["convert", "shard"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_the_input_dataset_as_output_or_around_it_is_refused(s3, bucket, dataset, command, overwrite):
    before = objects(s3, bucket)
    for out, what in (
        (dataset, "would replace the input"),
        (f"s3://{bucket}/ds/", "would replace the input"),
        (f"s3://{bucket}/ds/inner", "would be inside the input"),
    ):
        extra = ["--num-shards", "2"] if command == "shard" else []
        r = lovecraft(command, dataset, "-o", out, "--to", "hdf5", *extra, *overwrite, "-q")
        hint = "choose another output directory" if "replace" in what else "choose an output directory outside it"
        assert (r.exit_code, r.stderr) == (1, f"Error: {out.rstrip('/')}: the output {what} {dataset}; {hint}\n")
    assert objects(s3, bucket) == before and lc.verify(dataset).lines() == []


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_prefix_holding_the_input_object_is_refused(s3, bucket, overwrite):
    """``convert s3://b/raw/a.csv -o s3://b/raw``: the commit would delete ``raw/a.csv`` as a stray."""
    s3.put_object(Bucket=bucket, Key="raw/a.csv", Body=b"a\n1\n2\n")
    src = f"s3://{bucket}/raw/a.csv"
    r = lovecraft("convert", src, "-o", f"s3://{bucket}/raw", "--to", "parquet", *overwrite, "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://{bucket}/raw: the output would replace the input {src}; choose another output directory\n",
    )
    assert objects(s3, bucket) == {"raw/a.csv": 6}


def test_a_prefix_holding_other_objects_is_an_existing_output(s3, bucket, tmp_path):
    """Objects under the output prefix that are not a dataset's (nor a dead run's ``run-*/``) are the
    user's: refused without --overwrite, as an existing local directory is, instead of deleted at
    the commit."""
    s3.put_object(Bucket=bucket, Key="out/notes.txt", Body=b"mine")
    s3.put_object(Bucket=bucket, Key="out/run-20200101T000000Z-dead/part.parquet", Body=b"half")
    src = tmp_path / "in.csv"
    src.write_text("a\n1\n2\n")
    r = lovecraft("convert", str(src), "-o", f"s3://{bucket}/out", "--to", "parquet", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://{bucket}/out: output already exists (it holds s3://{bucket}/out/notes.txt, which no run "
        "writing here made: a dataset takes a prefix of its own); pass --overwrite to replace everything under "
        "it, or choose another path\n",
    )
    assert sorted(objects(s3, bucket)) == ["out/notes.txt", "out/run-20200101T000000Z-dead/part.parquet"]
    s3.delete_object(Bucket=bucket, Key="out/notes.txt")
    r = lovecraft("convert", str(src), "-o", f"s3://{bucket}/out", "--to", "parquet", "-q")
    assert r.exit_code == 0, r.stderr  # a dead run's objects alone are no output: removed at the commit
    assert not any("dead" in k for k in objects(s3, bucket)) and lc.verify(f"s3://{bucket}/out").lines() == []


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_object_named_as_the_output_is_refused(s3, bucket, tmp_path, overwrite):
    """``-o s3://b/in/x.csv`` where x.csv is an object (an input): the dataset was written under
    ``in/x.csv/`` beside it, exit 0, and ``s3://b/in/x.csv`` then read as the dataset, never the
    CSV again (found by an outside trial)."""
    s3.put_object(Bucket=bucket, Key="in/x.csv", Body=b"a\n1\n2\n")
    src = tmp_path / "p.csv"
    src.write_text("b\n3\n")
    r = lovecraft("convert", str(src), "-o", f"s3://{bucket}/in/x.csv", "--to", "parquet", *overwrite, "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: s3://{bucket}/in/x.csv: is an object; a dataset takes a prefix that names no object; choose another "
        "path (a prefix of its own, such as s3://bucket/out/)\n",
    )
    assert objects(s3, bucket) == {"in/x.csv": 6}
