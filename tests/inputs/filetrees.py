"""Trees of generated files for the files-input tests: images in class folders (PNG and JPEG,
several sizes and modes, made with Pillow here), audio clips (soundfile), a sidecar CSV."""

from __future__ import annotations

import io
import os

import numpy as np

# (class, name, format, mode, (width, height))
IMAGES = [
    ("cat", "000.jpg", "JPEG", "RGB", (40, 30)),
    ("cat", "001.png", "PNG", "RGBA", (25, 50)),
    ("cat", "002.png", "PNG", "L", (33, 33)),
    ("cat", "003.jpg", "JPEG", "L", (64, 48)),
    ("dog", "000.png", "PNG", "P", (50, 20)),
    ("dog", "001.jpg", "JPEG", "RGB", (100, 80)),
    ("dog", "010.png", "PNG", "RGB", (16, 16)),
    ("bird", "a/000.jpg", "JPEG", "CMYK", (70, 21)),
    ("bird", "a.png", "PNG", "LA", (9, 40)),
]
CLASSES = ["bird", "cat", "dog"]
# the tree's order: each directory's entries sorted by name ("a" the folder before "a.png")
ORDER = [
    "bird/a/000.jpg",
    "bird/a.png",
    "cat/000.jpg",
    "cat/001.png",
    "cat/002.png",
    "cat/003.jpg",
    "dog/000.png",
    "dog/001.jpg",
    "dog/010.png",
]


def image_bytes(fmt: str, mode: str, size: tuple[int, int], seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    w, h = size
    bands = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "CMYK": 4, "P": 1}[mode]
    # smooth gradients plus noise: JPEG keeps them close, resizing has something to average
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 255 // max(1, w - 1) + yy * 128 // max(1, h - 1)) % 256
    arr = np.stack([(base + 40 * b + rng.integers(0, 30, (h, w))) % 256 for b in range(bands)], axis=-1)
    arr = arr.astype(np.uint8)
    im = Image.frombytes(mode if mode != "P" else "L", (w, h), arr.tobytes())
    if mode == "P":
        im = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    buf = io.BytesIO()
    im.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def make_images(root: str) -> dict[str, bytes]:
    """The tree of :data:`IMAGES` under ``root``; returns {relative path: bytes}."""
    out = {}
    for k, (cls, name, fmt, mode, size) in enumerate(IMAGES):
        rel = f"{cls}/{name}"
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = image_bytes(fmt, mode, size, k)
        with open(path, "wb") as f:
            f.write(data)
        out[rel] = data
    return out


def make_sidecar(path: str, rels: list[str]) -> dict[str, tuple[str, str]]:
    """A CSV keyed by relative path for some files and by path stem for the others; returns
    {relative path: (caption, split)}."""
    rows = {}
    with open(path, "w", encoding="utf-8") as f:
        f.write("file_name,caption,split\n")
        for k, rel in enumerate(rels):
            key = rel if k % 2 else os.path.splitext(rel)[0]
            caption, split = f"picture {k}, of a {rel.split('/')[0]}", "val" if k % 3 == 0 else "train"
            f.write(f'{key},"{caption}",{split}\n')
            rows[rel] = (caption, split)
    return rows


def make_audio(root: str) -> dict[str, tuple[bytes, int]]:
    """Clips under ``root/{speech,music}``: WAV 16 kHz mono, WAV 8 kHz, FLAC 44.1 kHz stereo, OGG
    22.05 kHz; returns {relative path: (bytes, rate)}."""
    import soundfile as sf

    clips = [
        ("speech/000.wav", 16000, 1, "WAV", "PCM_16", 0.5),
        ("speech/001.wav", 8000, 1, "WAV", "FLOAT", 0.3),
        ("music/000.flac", 44100, 2, "FLAC", "PCM_24", 0.4),
        ("music/001.ogg", 22050, 1, "OGG", "VORBIS", 0.25),
    ]
    out = {}
    for k, (rel, rate, ch, fmt, sub, seconds) in enumerate(clips):
        t = np.arange(int(rate * seconds)) / rate
        x = np.stack([0.4 * np.sin(2 * np.pi * (220 + 110 * c + 50 * k) * t) for c in range(ch)], axis=1)
        buf = io.BytesIO()
        sf.write(buf, x, rate, format=fmt, subtype=sub)
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        out[rel] = (buf.getvalue(), rate)
    return out
