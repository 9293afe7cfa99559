"""Decoding files when asked: images (PNG and JPEG of several sizes and modes) into fixed-shape
uint8[H, W, C] columns equal to Pillow's own decode, convert and resize, read back with h5py,
np.load and pyarrow; audio (WAV, FLAC, OGG) into float32 samples equal to soundfile's decode,
averaged to mono and resampled as SciPy's resample_poly does; a file that does not decode is one
line naming it, or skipped and counted."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import lovecraft_convert as lc
from tests.conftest import lovecraft
from tests.inputs.filetrees import IMAGES, ORDER, make_audio, make_images
from tests.readback import disk_digest, manifest, read_back

PIL = pytest.importorskip("PIL")
IMAGES_BY = {f"{cls}/{name}": size for cls, name, _, _, size in IMAGES}


def pillow_reference(data: bytes, size: tuple[int, int], mode: str, resize: str) -> np.ndarray:
    """What the docs say --decode image does, with Pillow's calls written out here."""
    from PIL import Image, ImageOps

    im = Image.open(io.BytesIO(data))
    im.load()
    im = im.convert(mode)
    if im.size != size:
        f = Image.Resampling.BILINEAR
        if resize == "shorter":
            im = ImageOps.fit(im, size, f)
        elif resize == "fit":
            im = ImageOps.pad(im, size, f, color=0)
        elif resize == "stretch":
            im = im.resize(size, f)
        else:
            canvas = Image.new(mode, size, 0)
            canvas.paste(im, ((size[0] - im.size[0]) // 2, (size[1] - im.size[1]) // 2))
            im = canvas
    a = np.asarray(im)
    return a.reshape(a.shape[0], a.shape[1], -1)


@pytest.fixture
def images(tmp_path):
    root = str(tmp_path / "imgs")
    return root, make_images(root)


@pytest.mark.parametrize("resize", ["shorter", "fit", "crop", "stretch"])
def test_images_equal_pillows_decode_and_resize(tmp_path, images, resize):
    root, files = images
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", "hdf5", "--decode", "image", "--image-size", "32x24",
                  "--resize", resize, "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    cols = read_back(out, "hdf5")
    assert cols["image"].shape == (len(files), 24, 32, 3) and cols["image"].dtype == np.uint8
    for k, rel in enumerate(ORDER):
        np.testing.assert_array_equal(cols["image"][k], pillow_reference(files[rel], (32, 24), "RGB", resize), rel)
    r = lovecraft("verify", out, "--against", root)  # decoded again with the manifest's options
    assert r.exit_code == 0, r.stdout + r.stderr
    m = manifest(out)
    assert m["decode"] == {
        "column": "image", "decode": "image", "size": [32, 24], "shape": [24, 32, 3], "mode": "RGB",
        "resize": resize, "filter": "bilinear", "decoder": f"Pillow {PIL.__version__}",
    }  # fmt: skip
    assert [f["name"] for f in m["schema"]] == ["path", "image", "label"]


@pytest.mark.parametrize(("mode", "fmt"), [("L", "memmap"), ("RGBA", "parquet"), ("RGB", "tfrecord")])
def test_image_modes(tmp_path, images, mode, fmt):
    if fmt == "tfrecord":
        pytest.importorskip("tensorflow")
    root, files = images
    out = str(tmp_path / "out")
    lc.convert(root, out, to=fmt, decode="image", image_size="20x20", image_mode=mode, progress=False)
    got = np.asarray(read_back(out, fmt)["image"])
    c = len(mode)
    assert got.shape == (len(files), 20, 20, c)
    for k, rel in enumerate(ORDER):
        np.testing.assert_array_equal(got[k], pillow_reference(files[rel], (20, 20), mode, "shorter"), rel)


def test_shape_and_mode_from_the_first_image(tmp_path):
    """Without --image-size and --image-mode: the first image's size, and its mode mapped (L)."""
    root = tmp_path / "same"
    root.mkdir()
    from tests.inputs.filetrees import image_bytes

    blobs = {f"{k}.png": image_bytes("PNG", "L", (12, 7), k) for k in range(3)}
    for name, data in blobs.items():
        (root / name).write_bytes(data)
    out = str(tmp_path / "out")
    lc.convert(str(root), out, to="memmap", decode="image", progress=False)
    got = np.asarray(read_back(out, "memmap")["image"])
    assert got.shape == (3, 7, 12, 1)
    for k in range(3):
        np.testing.assert_array_equal(got[k], pillow_reference(blobs[f"{k}.png"], (12, 7), "L", "shorter"))
    (root / "3.png").write_bytes(image_bytes("PNG", "L", (13, 7), 9))
    r = lovecraft("convert", str(root), "-o", str(tmp_path / "o2"), "--to", "memmap", "--decode", "image", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}/3.png: is 13x7, not 12x7 as the first image (give --image-size WxH to resize every image); "
        "fix or remove it, or pass --on-bad-file skip to leave such files out (counted)\n",
    )


def test_a_colour_image_after_a_grey_first_one_and_16_bit_images(tmp_path):
    """The mode taken from a grey first image made every later colour image grey without a word,
    and a 16-bit depth map's values were clipped at 255 (L): the first is an error naming the file
    and the flag; the second a bad file (skipped and counted with --on-bad-file skip)."""
    from PIL import Image

    from tests.inputs.filetrees import image_bytes

    root = tmp_path / "mixed"
    root.mkdir()
    (root / "0.png").write_bytes(image_bytes("PNG", "L", (8, 8), 0))
    (root / "1.png").write_bytes(image_bytes("PNG", "RGB", (8, 8), 1))
    args = ["--to", "hdf5", "--decode", "image", "-q"]
    r = lovecraft("convert", str(root), "-o", str(tmp_path / "a"), *args)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}/1.png: is RGB, but every image is decoded as L (grey), the mode of the first image (L): its "
        "colour would be dropped; pass --image-mode RGB (or RGBA) to keep colour, or --image-mode L to make every "
        "image grey\n",
    )
    for mode, channels in (("RGB", 3), ("L", 1)):
        out = str(tmp_path / mode)
        r = lovecraft("convert", str(root), "-o", out, *args, "--image-mode", mode)
        assert r.exit_code == 0, r.stderr
        assert np.asarray(read_back(out, "hdf5")["image"]).shape == (2, 8, 8, channels)
    deep = tmp_path / "depth"
    deep.mkdir()
    values = np.arange(64, dtype=np.uint16).reshape(8, 8) * 900
    Image.fromarray(values).save(deep / "0.png")
    (deep / "1.png").write_bytes(image_bytes("PNG", "L", (8, 8), 2))
    r = lovecraft("convert", str(deep), "-o", str(tmp_path / "d"), *args)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {deep}/0.png: is an image of mode I;16 (more than 8 bits a pixel): decoded pixels are 8-bit, and "
        "values above 255 would be clipped; keep its bytes (leave out --decode) and decode it yourself; fix or "
        "remove it, or pass --on-bad-file skip to leave such files out (counted)\n",
    )
    r = lovecraft("convert", str(deep), "-o", str(tmp_path / "d"), *args, "--on-bad-file", "skip")
    assert r.exit_code == 0, r.stderr
    assert manifest(str(tmp_path / "d"))["skipped_files"]["count"] == 1


def test_a_truncated_jpeg_is_one_line_or_skipped_and_counted(tmp_path, images):
    root, files = images
    bad = os.path.join(root, "cat", "000.jpg")
    cut = files["cat/000.jpg"][:700]
    with open(bad, "wb") as f:
        f.write(cut)
    from PIL import Image

    with pytest.raises(OSError) as pillow:  # what Pillow itself says of it
        Image.open(io.BytesIO(cut)).load()
    said = str(pillow.value)
    assert said.startswith("image file is truncated")
    out = str(tmp_path / "out")
    args = ["convert", root, "-o", out, "--to", "hdf5", "--decode", "image", "--image-size", "16x16", "-q"]
    r = lovecraft(*args)
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {bad}: cannot decode the image ({said}); "
        "fix or remove it, or pass --on-bad-file skip to leave such files out (counted)\n",
    )
    assert r.stdout == ""
    assert not os.path.exists(out)
    assert sorted(os.listdir(tmp_path)) == ["imgs"]  # nothing left beside it
    r = lovecraft(*args[:-1], "--on-bad-file", "skip")
    assert r.exit_code == 0, r.stderr
    assert f"note: skipped 1 file (--on-bad-file skip): {bad} (cannot decode the image ({said}))" in r.stderr
    cols = read_back(out, "hdf5")
    assert [p.decode() if isinstance(p, bytes) else p for p in cols["path"]] == [p for p in ORDER if p != "cat/000.jpg"]
    m = manifest(out)
    assert m["skipped_files"] == {
        "count": 1, "by_reason": {"decode": 1},
        "first": [[bad, f"cannot decode the image ({said})"]],
    }  # fmt: skip
    assert m["rows"] == len(files) - 1


def test_skipped_files_are_counted_across_shard_workers(tmp_path, images):
    root, files = images
    for rel in ("cat/001.png", "dog/001.jpg"):
        with open(os.path.join(root, *rel.split("/")), "wb") as f:
            f.write(b"not an image")
    outs = []
    for workers in (1, 2):
        out = str(tmp_path / f"w{workers}")
        lc.shard(
            root, out, to="hdf5", decode="image", image_size="8x8", on_bad_file="skip", num_shards=2,
            workers=workers, part_bytes=2048, progress=False,
        )  # fmt: skip
        outs.append(out)
        m = manifest(out)
        assert m["rows"] == len(files) - 2
        assert m["skipped_files"]["count"] == 2 and m["skipped_files"]["by_reason"] == {"decode": 2}
        assert [p for p, _ in m["skipped_files"]["first"]] == [f"{root}/cat/001.png", f"{root}/dog/001.jpg"]
    assert disk_digest(outs[0]) == disk_digest(outs[1])


def test_an_image_too_large_for_the_budget(tmp_path):
    from PIL import Image

    root = tmp_path / "big"
    root.mkdir()
    buf = io.BytesIO()
    Image.new("RGB", (2000, 1000), (10, 20, 30)).save(buf, "PNG")  # 6 MB of pixels, a small file
    (root / "a.png").write_bytes(buf.getvalue())
    r = lovecraft("convert", str(root), "-o", str(tmp_path / "o"), "--to", "hdf5", "--decode", "image",
                  "--image-size", "8x8", "--max-memory", "16MiB", "-q")  # fmt: skip
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {root}/a.png: decodes 2000x1000 pixels (RGB) to 5.7 MiB, more than the 2.0 MiB one file may take "
        "under --max-memory 16.0 MiB (1/8 of it); raise --max-memory to 45.8 MiB or more\n",
    )


# --------------------------------------------------------------------------------------------
# audio
# --------------------------------------------------------------------------------------------


def audio_reference(data: bytes, rate: int) -> np.ndarray:
    """soundfile's decode, channels averaged, resampled by SciPy's resample_poly (same filter design)."""
    import soundfile as sf
    from scipy.signal import resample_poly

    x, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    mono = x.mean(axis=1, dtype=np.float32)
    if sr == rate:
        return mono
    from math import gcd

    g = gcd(sr, rate)
    return resample_poly(mono.astype(np.float64), rate // g, sr // g).astype(np.float32)


@pytest.mark.parametrize("fmt", ["parquet", "hdf5"])
def test_audio_decoded_and_resampled(tmp_path, fmt):
    pytest.importorskip("soundfile")
    pytest.importorskip("scipy")
    root = str(tmp_path / "audio")
    clips = make_audio(root)
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", fmt, "--decode", "audio", "--sample-rate", "16000", "-q")
    assert r.exit_code == 0, r.stderr
    cols = read_back(out, fmt)
    order = ["music/000.flac", "music/001.ogg", "speech/000.wav", "speech/001.wav"]
    assert [p.decode() if isinstance(p, bytes) else p for p in cols["path"]] == order
    for k, rel in enumerate(order):
        got = np.asarray(cols["audio"][k], dtype=np.float32)
        want = audio_reference(clips[rel][0], 16000)
        assert len(got) == len(want), rel
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=0, err_msg=rel)
    m = manifest(out)
    assert m["decode"]["sample_rate"] == 16000 and m["decode"]["resampler"].startswith("polyphase windowed sinc")
    assert m["labels"]["names"] == ["music", "speech"]


def test_a_broken_clip(tmp_path):
    pytest.importorskip("soundfile")
    root = str(tmp_path / "audio")
    clips = make_audio(root)
    bad = os.path.join(root, "speech", "001.wav")
    with open(bad, "wb") as f:
        f.write(b"RIFF\x00\x00\x00\x00WAVEjunk")
    r = lovecraft("convert", root, "-o", str(tmp_path / "o"), "--to", "parquet", "--decode", "audio",
                  "--sample-rate", "16000", "-q")  # fmt: skip
    assert r.exit_code == 1
    assert r.stderr.startswith(f"Error: {bad}: cannot decode the audio (")
    assert r.stderr.count("\n") == 1
    lc.convert(root, str(tmp_path / "o"), to="parquet", decode="audio", sample_rate=16000, on_bad_file="skip",
               progress=False)  # fmt: skip
    assert len(read_back(str(tmp_path / "o"), "parquet")["audio"]) == len(clips) - 1


# --------------------------------------------------------------------------------------------
# the resampler
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b"), [(44100, 16000), (8000, 16000), (22050, 16000), (48000, 44100), (16001, 16000)])
def test_resampler_equals_scipys_resample_poly(a, b):
    sp = pytest.importorskip("scipy.signal")
    from math import gcd

    from lovecraft_convert.inputs.resample import resample

    x = np.random.default_rng(a + b).standard_normal(a // 3).astype(np.float32)
    g = gcd(a, b)
    want = sp.resample_poly(x.astype(np.float64), b // g, a // g)
    got = resample(x, a, b)
    assert got.dtype == np.float32 and len(got) == len(want)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_resampler_keeps_a_tone_and_removes_what_aliases():
    from lovecraft_convert.inputs.resample import resample

    t = np.arange(44100) / 44100
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    got = resample(tone, 44100, 16000)
    t16 = np.arange(len(got)) / 16000
    inner = slice(400, -400)  # the ends are filtered as if padded with silence
    np.testing.assert_allclose(got[inner], np.sin(2 * np.pi * 1000 * t16)[inner], atol=2e-3)
    high = np.sin(2 * np.pi * 12000 * t).astype(np.float32)  # above 8 kHz: would alias to 4 kHz
    leaked = resample(high, 44100, 16000)[inner]
    assert np.sqrt(np.mean(leaked**2)) < 1e-2 * np.sqrt(0.5)  # at least 40 dB down


def test_the_shape_comes_from_the_first_image_that_decodes_when_skipping(tmp_path, images):
    root, files = images
    first = os.path.join(root, *ORDER[0].split("/"))
    with open(first, "wb") as f:
        f.write(b"broken")
    r = lovecraft("convert", root, "-o", str(tmp_path / "o"), "--to", "hdf5", "--decode", "image", "-q")
    assert (r.exit_code, r.stderr) == (
        1,
        f"Error: {first}: not an image (no format Pillow reads); the first image gives the shape: fix or remove it, "
        "or pass --on-bad-file skip to leave such files out (counted)\n",
    )
    # with --image-size the first image gives only the mode (and a clip the rate: no object's address)
    r = lovecraft("convert", root, "-o", str(tmp_path / "o"), "--to", "hdf5", "--decode", "image", "--image-size",
                  "16x16", "-q")  # fmt: skip
    assert "; the first image gives the mode: fix or remove it" in r.stderr
    r = lovecraft("convert", root, "-o", str(tmp_path / "o"), "--to", "hdf5", "--decode", "audio", "-q")
    assert r.exit_code == 1 and "; the first clip gives the rate: fix or remove it" in r.stderr, r.stderr
    assert " object at 0x" not in r.stderr and "(Error opening the file: " in r.stderr, r.stderr
    lc.convert(root, str(tmp_path / "o"), to="hdf5", decode="image", on_bad_file="skip", image_size="16x16",
               progress=False)  # fmt: skip
    m = manifest(str(tmp_path / "o"))
    assert m["rows"] == len(files) - 1 and m["decode"]["mode"] == "RGBA"  # bird/a.png's LA, the next one
    assert m["skipped_files"]["first"] == [[first, "not an image (no format Pillow reads)"]]


def test_decoding_threads_are_gone_after_the_call(tmp_path, images):
    import threading

    root, _ = images
    before = {t.ident for t in threading.enumerate()}
    lc.convert(root, str(tmp_path / "o"), to="hdf5", decode="image", image_size="8x8", progress=False)
    with pytest.raises(Exception):  # noqa: B017 - a failed call too (a file that does not decode)
        with open(os.path.join(root, "dog", "000.png"), "wb") as f:
            f.write(b"x")
        lc.convert(root, str(tmp_path / "o2"), to="hdf5", decode="image", image_size="8x8", progress=False)
    assert {t.ident for t in threading.enumerate()} == before


def test_decoded_pixels_narrowed_to_float16(tmp_path, images):
    """`--column-type image=float16` narrows the uint8 pixels (as --dtype's note suggests for integer
    columns); the downcast measured its errors in uint8 and crashed with NumPy's casting error."""
    root, files = images
    out = str(tmp_path / "out")
    r = lovecraft("convert", root, "-o", out, "--to", "hdf5", "--decode", "image", "--image-size", "16x12",
                  "--column-type", "image=float16", "-q")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    got = read_back(out, "hdf5")["image"]
    assert got.dtype == np.float16 and got.shape == (len(files), 12, 16, 3)
    for k, rel in enumerate(ORDER):  # every uint8 value is a float16 exactly
        want = pillow_reference(files[rel], (16, 12), "RGB", "shorter").astype(np.float16)
        np.testing.assert_array_equal(got[k], want, rel)
    report = manifest(out)["float16"]["image"]
    assert report["max_abs_error"] == 0.0 and report["overflow"] == 0


def test_an_empty_file_is_said_to_be_empty(tmp_path, images):
    """A zero-byte file was 'not an image (no format Pillow reads)': it is an empty file."""
    root = tmp_path / "e"
    root.mkdir()
    (root / "a.png").write_bytes(b"")
    for decode in ("image", "audio"):
        r = lovecraft("convert", str(root), "-o", str(tmp_path / "o"), "--to", "hdf5", "--decode", decode, "-q")
        assert r.exit_code == 1 and f"Error: {root}/a.png: an empty file (0 bytes); " in r.stderr, r.stderr
