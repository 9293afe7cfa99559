"""What a loader hands a framework is what the framework's layers take.

* Token ids stored as uint16 (a vocabulary of 400) reach PyTorch and Keras as int64, which
  ``nn.Embedding``, ``F.cross_entropy`` and ``keras.layers.Embedding`` take; ``keep_dtype=True``
  keeps the stored dtype; numpy ``batches()`` always does.
* Other integer columns: int64 unless int64 or uint8 (pixels) already.
* ``model.fit(ds.to_tf_dataset(...))`` fits a ``keras.Sequential`` model on a converted CSV as a
  user writes it: the label found by name (or given with ``y=``), the other numeric columns one
  ``[batch, features]`` tensor.
* Without PyTorch, ``to_torch()`` says so in one line.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import lovecraft_convert as lc
from lovecraft_convert.errors import DependencyError
from tests.conftest import lovecraft

VOCAB = 400
WORDS = [f"w{i}" for i in range(500)]


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """A text bucketed with a tokenizer.json of 400 tokens (ids stored as uint16): Parquet, padded."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    base = tmp_path_factory.mktemp("tokens")
    vocab = {"<EOT>": 0, "<PAD>": 1, **{w: i + 2 for i, w in enumerate(WORDS[: VOCAB - 2])}}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="<PAD>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok_path = str(base / "tokenizer.json")
    tok.save(tok_path)
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS[: VOCAB - 2], size=int(n))) for n in rng.integers(2, 40, size=300)]
    src = base / "corpus.txt"
    src.write_text("\n".join(lines) + "\n")
    out = str(base / "b")
    r = lovecraft("bucket", str(src), "-o", out, "--to", "parquet", "--num-buckets", "3", "--tokenizer", tok_path,
                  "--eos", "<EOT>", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    return out


def test_token_ids_reach_torch_layers_as_int64(tokenized):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    ds = lc.open_dataset(tokenized)
    assert next(iter(ds.batches(16)))["tokens"].dtype == np.uint16  # numpy keeps the stored dtype
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB)
    want = {tuple(r) for b in ds.batches(16) for r in b["tokens"].tolist()}
    got = set()
    for b in torch.utils.data.DataLoader(ds.to_torch(batch_size=16), batch_size=None):
        tokens = b["tokens"]
        assert tokens.dtype == torch.int64 and b["length"].dtype == torch.int64
        logits = head(emb(tokens[:, :-1]))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        assert torch.isfinite(loss)
        got |= {tuple(r) for r in tokens.tolist()}
    assert got == want  # the same ids, widened
    kept = next(iter(ds.to_torch(batch_size=16, keep_dtype=True)))
    assert kept["tokens"].dtype == torch.uint16
    with pytest.raises(RuntimeError, match="indices"):
        emb(kept["tokens"])  # what keep_dtype=True leaves to the caller


def test_token_ids_reach_keras_layers_as_int64(tokenized):
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")

    ds = lc.open_dataset(tokenized)
    d = ds.to_tf_dataset(batch_size=16, y=None)
    assert d.element_spec["tokens"].dtype == tf.int64
    layer = keras.layers.Embedding(VOCAB, 8)
    b = next(iter(d))
    assert layer(b["tokens"]).shape == (*b["tokens"].shape, 8)
    assert ds.to_tf_dataset(batch_size=16, y=None, keep_dtype=True).element_spec["tokens"].dtype == tf.uint16


def test_other_integer_columns(tmp_path):
    """uint16 ids and an int32 label become int64; uint8 pixels stay uint8 (map-style and iterable)."""
    torch = pytest.importorskip("torch")
    n = 40
    cols = {
        "ids": np.arange(n * 3, dtype=np.uint16).reshape(n, 3),
        "pixels": np.full((n, 2, 2), 7, dtype=np.uint8),
        "label": (np.arange(n) % 3).astype(np.int32),
        "score": np.linspace(0, 1, n).astype(np.float32),
    }
    paths = []
    for k, v in cols.items():
        np.save(tmp_path / f"{k}.npy", v)
        paths.append(str(tmp_path / f"{k}.npy"))
    out = str(tmp_path / "ds")
    lc.convert(paths, out, to="memmap", progress=False)
    ds = lc.open_dataset(out)
    want = {"ids": torch.int64, "pixels": torch.uint8, "label": torch.int64, "score": torch.float32}
    row = ds.to_torch()[5]
    assert {k: v.dtype for k, v in row.items()} == want
    assert row["ids"].tolist() == [15, 16, 17]
    batch = next(iter(torch.utils.data.DataLoader(ds.to_torch(), batch_size=8)))
    assert {k: v.dtype for k, v in batch.items()} == want
    batch = next(iter(ds.to_torch(batch_size=8)))
    assert {k: v.dtype for k, v in batch.items()} == want
    np.testing.assert_array_equal(batch["ids"].numpy(), cols["ids"][:8])
    kept = ds.to_torch(keep_dtype=True)[5]
    assert kept["ids"].dtype == torch.uint16 and kept["label"].dtype == torch.int32


CARS = """Name,Miles_per_Gallon,Cylinders,Horsepower,Weight_in_lbs,Acceleration,Origin
chevrolet chevelle malibu,18,8,130,3504,12,USA
buick skylark 320,15,8,165,3693,11.5,USA
citroen ds-21 pallas,,4,115,3090,17.5,Europe
toyota corona mark ii,24,4,95,2372,15,Japan
ford torino,17,8,140,3449,10.5,USA
"""


@pytest.fixture(scope="module")
def cars(tmp_path_factory):
    """vega_datasets' cars, the shape of it: a text column, numbers, a missing value."""
    base = tmp_path_factory.mktemp("cars")
    src = base / "cars.csv"
    header, rows = CARS.split("\n", 1)
    src.write_text(header + "\n" + rows * 40)
    out = str(base / "cars")
    assert lovecraft("convert", str(src), "-o", out, "--to", "parquet", "-q").exit_code == 0
    return out


def _model(keras, inputs: int):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    return model


def test_keras_sequential_fits_a_converted_csv_as_written(cars):
    """The code a README shows, verbatim."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")

    # -- as the docs show it ------------------------------------------------------------
    ds = lc.open_dataset(cars, columns=["Cylinders", "Horsepower", "Weight_in_lbs", "Acceleration", "Miles_per_Gallon"])
    train = ds.to_tf_dataset(batch_size=32, shuffle=True, seed=0, y="Miles_per_Gallon")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(train, epochs=2, verbose=0)
    # ------------------------------------------------------------------------------------
    x_spec, y_spec = train.element_spec
    assert x_spec == tf.TensorSpec((None, 4), tf.float32) and y_spec.shape.as_list() == [None]
    assert len(history.history["loss"]) == 2
    xb, yb = next(iter(ds.to_tf_dataset(batch_size=5, y="Miles_per_Gallon")))
    np.testing.assert_array_equal(xb.numpy()[0], [8, 130, 3504, 12])  # the columns side by side, in order
    assert np.isnan(yb.numpy()[2])  # the missing value


def test_a_column_named_label_is_found(tmp_path):
    keras = pytest.importorskip("keras")
    src = tmp_path / "d.csv"
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 3))
    src.write_text("a,b,c,label\n" + "".join(f"{r[0]},{r[1]},{r[2]},{int(r[0] > 0)}\n" for r in x))
    out = str(tmp_path / "d")
    assert lovecraft("convert", str(src), "-o", out, "--to", "memmap", "-q").exit_code == 0
    ds = lc.open_dataset(out)
    history = _model(keras, 3).fit(ds.to_tf_dataset(batch_size=32, shuffle=True, seed=0), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    history = _model(keras, 3).fit(ds.to_keras_pydataset(batch_size=32), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    xb, yb = ds.to_keras_pydataset(batch_size=4)[0]
    np.testing.assert_array_equal(xb, x[:4].astype(np.float32))
    assert xb.dtype == np.float32 and yb.dtype == np.int64


def test_text_columns_leave_the_inputs_a_dict(cars):
    tf = pytest.importorskip("tensorflow")
    spec = lc.open_dataset(cars).to_tf_dataset(batch_size=8, y="Miles_per_Gallon").element_spec
    assert isinstance(spec[0], dict) and spec[0]["Name"].dtype == tf.string
    with pytest.raises(lc.DatasetError) as e:
        lc.open_dataset(cars, columns=["Horsepower"]).to_tf_dataset(batch_size=8, y="Horsepower")
    assert str(e.value) == "the label 'Horsepower' is every column: no inputs are left; select more columns"


def test_to_torch_without_torch_says_so(cars, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` meets when it is not installed
    with pytest.raises(DependencyError) as e:
        lc.open_dataset(cars).to_torch(batch_size=8)
    assert str(e.value) == (
        "to_torch() needs torch, which is not installed; pip install torch (https://pytorch.org/get-started/locally/)"
    )
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(DependencyError) as e:
        lc.open_dataset(cars).to_tf_dataset(batch_size=8)
    assert (
        str(e.value) == "to_tf_dataset() needs tensorflow, which is not installed; pip install 'lovecraft-convert[tf]'"
    )
