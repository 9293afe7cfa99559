"""tf.data and Keras: TFRecord through TFRecordDataset, other formats through a generator with an
exact signature; Keras fits from both and from a PyDataset; file-level auto-sharding."""

from __future__ import annotations

import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import lovecraft_convert as lc  # noqa: E402
from lovecraft_convert.loaders import open_dataset  # noqa: E402

from .helpers import FORMATS, RANGES, assert_each_once, bucket_of, build_all, build_bucketed, row_ids  # noqa: E402

N = 600


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("tf"), N)


def _ids(d) -> np.ndarray:
    parts = []
    for b in d.as_numpy_iterator():
        parts.append(np.asarray(b["id"] if isinstance(b, dict) else b[0]["id"]).reshape(-1))
    return np.concatenate(parts)


def _tiny_model(inputs: int) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize("fmt", ["tfrecord", "memmap"])
def test_keras_fits_an_epoch(datasets, fmt):
    ds = open_dataset(datasets[fmt], columns=["x", "label"])
    d = ds.to_tf_dataset(batch_size=64, shuffle=True, seed=0)
    x_spec, y_spec = d.element_spec  # (inputs, labels): the "label" column is the target
    assert x_spec.shape.as_list() == [None, 4] and y_spec.dtype == tf.int64
    assert d.cardinality().numpy() == -(-N // 64)
    history = _tiny_model(4).fit(d, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_keras_fits_from_a_pydataset(datasets):
    ds = open_dataset(datasets["memmap", 4], columns=["x", "label"])
    seq = ds.to_keras_pydataset(batch_size=64, shuffle=True, seed=0)
    assert isinstance(seq, keras.utils.PyDataset)
    assert len(seq) == -(-N // 64)
    xb, yb = seq[0]
    assert xb.shape == (64, 4) and yb.shape == (64,)
    history = _tiny_model(4).fit(seq, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


def test_pydataset_epochs_are_exact_permutations(datasets):
    ds = open_dataset(datasets["hdf5"], columns=["id", "x"])
    seq = ds.to_keras_pydataset(batch_size=50, shuffle=True, seed=4, x=["id", "x"], y=None)
    first = np.concatenate([seq[i]["id"] for i in range(len(seq))])
    assert_each_once(first, N)
    seq.on_epoch_end()
    second = np.concatenate([seq[i]["id"] for i in range(len(seq))])
    assert_each_once(second, N)
    assert not np.array_equal(first, second)
    with pytest.raises(Exception, match="needs random access"):
        open_dataset(datasets["parquet"]).to_keras_pydataset(batch_size=8)


@pytest.mark.parametrize("fmt", FORMATS)
def test_signature_is_exact_and_records_come_once(datasets, fmt):
    ds = open_dataset(datasets[fmt, 4])
    d = ds.to_tf_dataset(batch_size=32, drop_remainder=True, y=None)
    spec = d.element_spec
    assert spec["x"] == tf.TensorSpec((32, 4), tf.float32)
    assert spec["h"] == tf.TensorSpec((32, 3), tf.float16)
    assert spec["id"] == tf.TensorSpec((32,), tf.int64)
    got = list(d.as_numpy_iterator())
    assert len(got) == N // 32
    cols = datasets["cols"]
    for b in got:
        assert b["h"].dtype == np.float16
        np.testing.assert_array_equal(b["h"], cols["h"][b["id"]])
    f32 = ds.to_tf_dataset(batch_size=32, dtype_float16="float32", y=None)
    assert f32.element_spec["h"].dtype == tf.float32
    assert_each_once(_ids(ds.to_tf_dataset(batch_size=32, shuffle=True, seed=1, y=None)), N)


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet"])
def test_same_seed_same_order_and_epochs_differ(datasets, fmt):
    ds = open_dataset(datasets[fmt, 4], columns=["id"])

    def make():
        return ds.to_tf_dataset(batch_size=16, shuffle=True, seed=7, shuffle_buffer=100)

    a = make()
    e1, e2 = _ids(a), _ids(a)  # two passes over one dataset: two epochs
    assert_each_once(e1, N)
    assert_each_once(e2, N)
    assert not np.array_equal(e1, e2)
    np.testing.assert_array_equal(_ids(make()), e1)


def test_tfrecord_file_level_auto_sharding(datasets):
    """tf.distribute's FILE auto-shard rewrite finds our TFRecord files: workers read disjoint shards."""
    try:
        from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset
    except ImportError:
        pytest.skip("this TensorFlow has no _AutoShardDataset")
    ds = open_dataset(datasets["tfrecord", 4], columns=["id"])
    seen = []
    for index in range(2):
        d = ds.to_tf_dataset(batch_size=16, y=None, prefetch=False)
        opts = tf.data.Options()
        opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
        d = _AutoShardDataset(d.with_options(opts), num_workers=2, index=index, num_replicas=2)
        seen.append(_ids(d))
    assert 0 < len(seen[0]) < N
    assert_each_once(np.concatenate(seen), N)


@pytest.mark.parametrize("fmt", ["tfrecord", "hdf5"])
def test_input_context_splits_pipelines(datasets, fmt):
    ds = open_dataset(datasets[fmt, 4], columns=["id"])
    seen = []
    for i in range(3):
        ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=i, num_replicas_in_sync=3)
        seen.append(_ids(ds.to_tf_dataset(batch_size=16, shuffle=True, seed=2, input_context=ctx)))
    assert_each_once(np.concatenate(seen), N)


def test_text_through_tf(tmp_path):
    from .helpers import build_text

    lines = ["a", "bb", "", "ccc ✓"] * 10
    for fmt in ("tfrecord", "parquet"):
        ds = open_dataset(build_text(tmp_path, fmt, lines))
        d = ds.to_tf_dataset(batch_size=8)
        assert d.element_spec["text"].dtype == tf.string
        got = [s.decode() for b in d.as_numpy_iterator() for s in b["text"]]
        assert got == lines


@pytest.mark.parametrize("pad_to", ["batch", "bucket"])
@pytest.mark.parametrize("shuffled", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_bucketed_through_tf(tmp_path, fmt, shuffled, pad_to):
    """Real ``bucket`` output (ragged layout, written shuffled or not) through to_tf_dataset: every
    batch from one bucket, as wide as its longest row or its bucket, each line once."""
    path, truth = build_bucketed(tmp_path / "b", fmt, "ragged", shuffled)
    ds = open_dataset(path)
    d = ds.to_tf_dataset(batch_size=8, shuffle=True, seed=0, pad_to=pad_to, y=None)
    assert d.element_spec["tokens"].shape.as_list() == [None, None]
    assert d.element_spec["tokens"].dtype == tf.int64  # token ids as Keras layers take them (stored uint8)
    ids = []
    for b in d.as_numpy_iterator():
        (k,) = {bucket_of(int(n)) for n in b["length"]}
        width = int(b["length"].max()) if pad_to == "batch" else RANGES[k][1]
        assert b["tokens"].shape == (len(b["length"]), width)
        ids.append(row_ids(b, truth))
    assert_each_once(np.concatenate(ids), len(truth))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_pipeline_starts_at_a_saved_state(datasets, fmt, shuffle):
    """``to_tf_dataset(state=...)`` gives the rest of the epoch ``batches()`` would have given, then
    the next epochs; the seed comes from the state; ``state_at`` is the state after k steps."""
    ds = open_dataset(datasets[fmt, 4])
    full = [b["id"] for b in ds.batches(32, shuffle=shuffle, seed=6, epochs=2)]
    it = ds.batches(32, shuffle=shuffle, seed=6)
    for _ in range(7):
        next(it)
    state = it.state_dict()
    # (an iterator's state also says where it ends: "until", the end of its epochs)
    assert state == ds.state_at(32, shuffle=shuffle, seed=6, step=7) | {"rank": 0, "until": 1}
    d = ds.to_tf_dataset(32, shuffle=shuffle, state=state, x=["id", "x", "h"])
    got = [np.asarray(b[0]["id"]) for b in d.as_numpy_iterator()]  # (features, label)
    assert len(got) == len(full) // 2 - 7
    for a, b in zip(got, full[7:], strict=False):
        np.testing.assert_array_equal(a, b)
    second = [np.asarray(b[0]["id"]) for b in d.as_numpy_iterator()]  # the next pass: epoch 1, whole
    np.testing.assert_array_equal(np.concatenate(second), np.concatenate(full[len(full) // 2 :]))


def test_a_tf_pipeline_refuses_a_state_of_another_seed(datasets):
    from lovecraft_convert.errors import DatasetError

    ds = open_dataset(datasets["parquet"])
    state = ds.state_at(32, shuffle=True, seed=1, step=2)
    with pytest.raises(DatasetError) as e:
        ds.to_tf_dataset(32, shuffle=True, seed=2, state=state)
    assert str(e.value) == (
        "the saved state is of another seed (seed 1; this loader has seed 2); "
        "resume with the dataset and options the state was saved with"
    )


def test_a_mixture_through_tf_data_and_its_state(datasets):
    paths = [datasets["parquet"], datasets["memmap", 4]]
    mix = open_dataset(paths, weights=[0.7, 0.3], seed=1, exhausted="cycle")
    want = [b["id"] for b in mix.batches(40, shuffle=True, seed=3)]
    it = mix.batches(40, shuffle=True, seed=3)
    for _ in range(5):
        next(it)
    d = open_dataset(paths, weights=[0.7, 0.3], seed=1, exhausted="cycle").to_tf_dataset(
        40, shuffle=True, x=["id", "x"], y="label", state=it.state_dict()
    )
    got = [np.asarray(xb["id"]) for xb, _ in d.as_numpy_iterator()]
    assert len(got) == len(want) - 5
    for a, b in zip(got, want[5:], strict=True):
        np.testing.assert_array_equal(a, b)


def test_pipelines_of_fresh_datasets_leave_no_files_open(tmp_path):
    """TF's registry of generators keeps a from_generator function after its pipeline is gone: held
    by it, the plan kept the dataset's files open, 8 more per epoch of a fresh 8-shard dataset (a
    notebook re-running a cell reaches the limit of open files; an outside trial). An abandoned
    pass releases them too."""
    import gc

    rng = np.random.default_rng(0)
    one, out = str(tmp_path / "one"), str(tmp_path / "sh")
    lc.convert({"x": rng.normal(size=(4000, 3)).astype(np.float32), "label": rng.integers(0, 5, 4000)}, one,
               to="parquet", progress=False)  # fmt: skip
    lc.shard(one, out, to="parquet", num_shards=8, workers=1, progress=False)

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def epoch(seed: int, whole: bool) -> None:
        d = lc.open_dataset(out).to_tf_dataset(batch_size=256, shuffle=True, seed=seed)
        it = iter(d)
        if whole:
            assert sum(int(x.shape[0]) for x, _ in it) == 4000
        else:
            next(it)
        del it, d
        gc.collect()

    epoch(0, True)
    before = fds()
    for k in range(1, 6):
        epoch(k, k % 2 == 1)
    assert fds() <= before + 1  # (TF may hold one of its own)
