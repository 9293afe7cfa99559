"""``verify`` checks every manifest field a reader relies on against the files: a TFRecord dataset's
feature spec (shape, dtype, type; each bucket's too) and compression, a Megatron dtype and its code,
and the token sections (``tokenizer``, ``bucketing``, ``packing``). Each field is tampered with
alone (the files and their digests untouched) and verify must name it; every one of these passed
verify before (and then ``to_tf_dataset``, or a training loop trusting the field, failed)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("sections")
    np.save(d / "x.npy", np.arange(600, dtype=np.float32).reshape(300, 2))
    (d / "docs.txt").write_text("".join(f"{'word ' * (i % 13)}end{i}\n" for i in range(400)))
    docs = [str(d / "docs.txt")]
    out = {k: str(d / k) for k in ("tfrecord", "tfrecord-gz", "megatron", "tokens", "buckets", "buckets-tf", "packed")}
    lc.convert([str(d / "x.npy")], out["tfrecord"], to="tfrecord", progress=False)
    lc.convert([str(d / "x.npy")], out["tfrecord-gz"], to="tfrecord", compression="gzip", progress=False)
    lc.convert(docs, out["megatron"], to="megatron", tokenizer="bytes", progress=False)
    lc.convert(docs, out["tokens"], to="parquet", tokenizer="bytes", eos=10, bos=2, progress=False)
    lc.bucket(docs, out["buckets"], to="memmap", num_buckets=3, eos=10, workers=1, progress=False)
    lc.bucket(docs, out["buckets-tf"], to="tfrecord", num_buckets=3, workers=1, progress=False)
    lc.bucket(docs, out["packed"], to="memmap", layout="packed", seq_len=32, pad_last=True, pad_id=7, bos=2,
              workers=1, progress=False)  # fmt: skip
    for ds in out.values():
        assert lc.verify(ds).ok, lc.verify(ds).lines()
    return out


def _tampered(src: str, tmp_path, path: list, value) -> str:
    ds = str(tmp_path / "ds")
    shutil.copytree(src, ds)
    with open(os.path.join(ds, "_manifest.json")) as f:
        m = json.load(f)
    at = m
    for k in path[:-1]:
        at = at[k]
    at[path[-1]] = value
    with open(os.path.join(ds, "_manifest.json"), "w") as f:
        json.dump(m, f)
    return ds


SAY = "the schema (and the records, which verify decodes against it) say"
M = "_manifest.json"
CASES = [
    ("tfrecord", ["tfrecord", "feature_spec", "x", "shape"], [5], [f'{M}: tfrecord.feature_spec["x"].shape is [5]; {SAY} [2]']),
    ("tfrecord", ["tfrecord", "feature_spec", "x", "dtype"], "int64",
     [f'{M}: tfrecord.feature_spec["x"].dtype is "int64"; {SAY} "float32"']),
    ("tfrecord", ["tfrecord", "feature_spec", "x", "type"], "VarLenFeature",
     [f'{M}: tfrecord.feature_spec["x"].type is "VarLenFeature"; {SAY} "FixedLenFeature"']),
    ("tfrecord", ["tfrecord", "compression"], "ZLIB", [f'{M}: tfrecord.compression is "ZLIB", not one of "GZIP" or null']),
    ("tfrecord", ["tfrecord", "compression"], "GZIP",
     ["data.tfrecord: is not compressed; the manifest's tfrecord.compression is 'GZIP'"]),
    ("tfrecord-gz", ["tfrecord", "compression"], None,
     ["data.tfrecord.gz: is gzip; the manifest's tfrecord.compression is None"]),
    ("buckets-tf", ["buckets", 1, "feature_spec", "tokens", "shape"], [5],
     [f'{M}: buckets[1].feature_spec["tokens"].shape is [5]; {SAY} [41]']),
    ("megatron", ["megatron", "dtype_code"], 3, [f"{M}: megatron.dtype_code is 3; the code of the schema's uint8 is 1"]),
    ("megatron", ["megatron", "dtype"], "int16", [f"{M}: megatron.dtype is 'int16'; the schema says uint8"]),
    ("tokens", ["tokenizer", "eos_id"], 11, [f"{M}: tokenizer.eos_id is 11; 400 documents do not end with it"]),
    ("tokens", ["tokenizer", "bos_id"], 3, [f"{M}: tokenizer.bos_id is 3; 400 documents do not start with it"]),
    ("tokens", ["tokenizer", "vocab_size"], 100,
     [f"{M}: tokenizer.vocab_size is 100; the bytes tokenizer has 256",
      f"{M}: tokenizer.vocab_size is 100; the data holds token id 119"]),
    ("tokens", ["tokenizer", "dtype"], "uint16", [f"{M}: tokenizer.dtype is 'uint16'; the token column holds 'uint8'"]),
    ("buckets", ["bucketing", "pad_id"], 5, [f"{M}: bucketing.pad_id is 5; 3505 padding values differ"]),
    ("buckets", ["bucketing", "longest"], 70, [f"{M}: bucketing.longest is 70; the data gives 67"]),
    ("buckets", ["bucketing", "tokens"], 1, [f"{M}: bucketing.tokens is 1; the data gives 14615"]),
    ("buckets", ["bucketing", "dtype"], "int32", [f"{M}: bucketing.dtype is 'int32'; the token column holds 'uint8'"]),
    ("buckets", ["bucketing", "length_histogram", 1, 0], 99, None),  # the whole histogram is shown
    ("buckets", ["bucketing", "boundaries"], [22, 41, 67],
     [f"{M}: bucketing.boundaries is [22, 41, 67]; buckets[1].max_length is 42",
      f"{M}: buckets[2].min_length is 43; bucketing.boundaries give 42"]),
    ("buckets", ["bucketing", "layout"], "ragged",
     [f"{M}: bucketing.layout is 'ragged'; buckets[{i}].layout is 'padded'" for i in range(3)]),
    ("buckets", ["buckets", 1, "tokens"], 5, [f"{M}: buckets[1].tokens is 5; the data gives 4242"]),
    ("buckets", ["bucketing", "tokenizer", "eos_id"], 12,
     [f"{M}: bucketing.tokenizer.eos_id is 12; 400 documents do not end with it"]),
    ("buckets", ["bucketing", "input_sequences"], 401,
     [f"{M}: bucketing.input_sequences is 401; the rows kept and dropped add up to 400"]),
    ("packed", ["packing", "pad_id"], 8, [f"{M}: packing.pad_id is 8; the last row's 9 padding tokens are not all 8"]),
    ("packed", ["packing", "tokens"], 5, [f"{M}: packing.tokens is 5; the rows, padding and dropped tokens give 14615"]),
    ("packed", ["packing", "documents"], 5, [f"{M}: packing.documents is 5; the document starts stored give at least 400"]),
    ("packed", ["packing", "order"], "shuffled", [f"{M}: packing.order is 'shuffled'; the manifest's shuffle says 'input'"]),
    ("packed", ["packing", "tokenizer", "bos_id"], 3,
     [f"{M}: packing.tokenizer.bos_id is 3; 400 documents do not start with it"]),
    ("packed", ["packing", "dtype"], "uint16", [f"{M}: packing.dtype is 'uint16'; the token column holds 'uint8'"]),
    ("packed", ["packing", "pad_last"], False, [f"{M}: packing.padding_tokens is 9; pad_last allows 0"]),
    ("packed", ["packing", "rows"], 400, [f"{M}: packing.rows is 400; the manifest's rows are 457",
                                          f"{M}: packing.tokens is 14615; the rows, padding and dropped tokens give 12791",
                                          f"{M}: packing.padding_efficiency is 0.999385; the data gives 0.999297"]),
]  # fmt: skip


@pytest.mark.parametrize("name, path, value, said", CASES, ids=[".".join(map(str, c[1])) + f"={c[2]}" for c in CASES])
def test_a_tampered_field_is_named_by_verify(made, tmp_path, name, path, value, said):
    ds = _tampered(made[name], tmp_path, path, value)
    lines = lc.verify(ds).lines()
    if said is None:
        assert len(lines) == 1 and lines[0].startswith(f"{ds}/{M}: {'.'.join(map(str, path[:2]))} is "), lines
    else:
        assert lines == [f"{ds}/{x}" for x in said]


def test_verify_cli_exits_1_naming_the_field(made, tmp_path):
    ds = _tampered(made["tfrecord"], tmp_path, ["tfrecord", "feature_spec", "x", "shape"], [5])
    r = lovecraft("verify", ds)
    assert (r.exit_code, r.stdout) == (1, f'{ds}/{M}: tfrecord.feature_spec["x"].shape is [5]; {SAY} [2]\n')
    assert r.stderr == f"{ds}: 1 problem found\n"


def test_open_dataset_refuses_a_feature_spec_the_schema_contradicts(made, tmp_path):
    """``to_tf_dataset`` parses with the manifest's feature spec: a spec that is not the schema's
    is refused when the dataset is opened (it failed inside tf.data, in TensorFlow's words)."""
    ds = _tampered(made["tfrecord"], tmp_path, ["tfrecord", "feature_spec", "x", "shape"], [5])
    with pytest.raises(lc.LovecraftError) as e:
        lc.open_dataset(ds)
    assert e.value.one_line() == (
        f'{ds}/{M}: tfrecord.feature_spec["x"].shape is [5]; {SAY} [2]; the manifest was edited or damaged; '
        "re-create the dataset"
    )


def test_a_padded_bucket_column_without_its_lengths_is_a_problem_not_a_traceback():
    """An edited manifest can drop the ``length`` column a padded bucketing needs (hypothesis found
    it in test_manifest_mutations): the sections say so instead of failing on the missing column."""
    from lovecraft_convert.formats.checking import Unit
    from lovecraft_convert.schema import Batch, Field, Schema
    from lovecraft_convert.verification.sections import Sections

    schema = Schema((Field("tokens", "sequence", "<u2"),))
    said: list[tuple[str, str]] = []
    m = {"bucketing": {"pad_id": 0, "tokenizer": None}}
    sections = Sections(m, schema, lambda field, message: said.append((field, message)))
    padded = np.array([[5, 6, 0], [7, 0, 0]], dtype=np.uint16)  # read back fixed-width, as padded buckets are
    sections.feed(Batch({"tokens": padded}, 2), Unit("bucket-00000", 2, ["b.tfrecord"], None))
    assert said == [("schema", "the padded column 'tokens' has no 'length' column beside it")]
