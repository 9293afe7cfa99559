"""The folder of JPEG images the files benchmarks share (bench/files_bench.py decodes it,
bench/writers_bench.py shards it): ``n`` JPEGs in 10 class folders (``class00/000000.jpg``...,
the ImageFolder layout), generated once with Pillow and NumPy (seeded) and cached in the bench's
work directory (``images-<n>``, whole when ``images-<n>.complete`` exists).

Each file is a crop of one of eight large pictures of gradients and shapes under noise, 320 to 640
pixels a side, quality 90: about 100 KB each, as photos of that size are; 10,000 of them are ~1 GB.

:func:`sorted_files` is the walk a user writes (``os.walk``, every directory sorted, hidden names
left out): for a folder of class folders, the order lovecraft's files input reads. This module imports nothing of
lovecraft (the peers' venv runs it too) and NumPy and Pillow only to generate.
"""

from __future__ import annotations

import os
import shutil
import sys

CLASSES = 10


def log(msg: str) -> None:
    print(f"imagefolder: {msg}", file=sys.stderr, flush=True)


def make_images(workdir: str, n: int) -> tuple[str, int]:
    """``n`` JPEGs in class folders (cached: made again only when missing); returns (root, bytes)."""
    root = os.path.join(workdir, f"images-{n}")
    done = root + ".complete"
    if not os.path.exists(done):
        _generate(root, n)
        open(done, "w").close()
    return root, sum(os.path.getsize(p) for _, p, _ in sorted_files(root))


def _generate(root: str, n: int) -> None:
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(44)
    log(f"generating {n} JPEGs in {root} (once)")
    bases = []
    for _ in range(8):  # large noisy pictures; each file is a crop of one, encoded on its own
        w, h = 1600, 1200
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        base = np.stack([(xx * rng.uniform(0.1, 0.6) + yy * rng.uniform(0.1, 0.6) + rng.uniform(0, 255)) % 256
                         for _ in range(3)], axis=-1)  # fmt: skip
        im = Image.fromarray(base.astype(np.uint8))
        draw = ImageDraw.Draw(im)
        for _ in range(60):
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            box = (x0, y0, x0 + int(rng.integers(10, w // 4)), y0 + int(rng.integers(10, h // 4)))
            draw.ellipse(box, fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
        im = im.filter(ImageFilter.GaussianBlur(1.5))
        noisy = np.asarray(im, dtype=np.int16) + rng.integers(-24, 25, (h, w, 3))
        bases.append(Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)))
    for k in range(n):
        d = os.path.join(root, f"class{k % CLASSES:02d}")
        os.makedirs(d, exist_ok=True)
        w, h = int(rng.integers(320, 641)), int(rng.integers(320, 641))
        base = bases[int(rng.integers(0, len(bases)))]
        x0, y0 = int(rng.integers(0, base.width - w)), int(rng.integers(0, base.height - h))
        base.crop((x0, y0, x0 + w, y0 + h)).save(os.path.join(d, f"{k:06d}.jpg"), "JPEG", quality=90)


def sorted_files(root: str) -> list[tuple[str, str, int]]:
    """(relative path with ``/``, path, label) of every file under ``root`` in sorted walk order;
    the label is the index of the file's top-level folder among the sorted folder names
    (ImageFolder's classes), -1 for a file directly in the root."""
    classes = sorted(d for d in os.listdir(root) if not d.startswith(".") and os.path.isdir(os.path.join(root, d)))
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.startswith("."):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            out.append((rel, path, index[rel.split("/")[0]] if "/" in rel else -1))
    return out
