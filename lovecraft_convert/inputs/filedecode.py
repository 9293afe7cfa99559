"""Decoding files when asked (``--decode image|audio``): images to fixed-shape ``uint8[H, W, C]``
rows with Pillow, audio to float32 sequences with soundfile.

Images: decoded by Pillow (the first frame of an animation), converted to the mode of
``--image-mode`` (``L``, ``RGB`` or ``RGBA``, as ``Image.convert`` converts; default: the first
image's mode mapped to one of them, see :func:`mode_for`), then brought to ``--image-size WxH``
with Pillow's :data:`FILTER` filter by ``--resize``:

* ``shorter`` (default): scaled so the shorter side fits and centre-cropped, in one resize of the
  central box (``ImageOps.fit``, torchvision's ``Resize`` + ``CenterCrop`` in one step);
* ``fit``: scaled to fit inside, the rest black (``ImageOps.pad``, centred);
* ``crop``: no scaling: the central WxH box, padded black where the image is smaller;
* ``stretch``: scaled to WxH, the aspect ratio not kept (``Image.resize``).

Without ``--image-size`` every image must have the first image's size. EXIF orientation is not
applied (as Pillow and torchvision leave it). Audio: decoded to float32, channels averaged to
mono, resampled to ``--sample-rate`` (default: the first file's rate) by
:func:`~.resample.resample`.

A file that does not decode raises :class:`BadFile` (the reader names it, or skips and counts it
with ``--on-bad-file skip``); one whose decoded size is more than the share of ``--max-memory``
an item may take is refused before it is decoded (:class:`TooLarge`).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np

from ..errors import OptionsError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm")
AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aiff", ".aif", ".au")
RESIZES = ("shorter", "fit", "crop", "stretch")
MODES = ("L", "RGB", "RGBA")
FILTER = "bilinear"  # Pillow's Image.Resampling.BILINEAR (torchvision's default), named in --help
DECODES = ("image", "audio")
ON_BAD = ("error", "skip")


class BadFile(Exception):
    """A file that cannot be read or decoded (its reason in words; ``kind``: ``read``, ``decode``);
    the reader names the file."""

    def __init__(self, reason: str, kind: str = "decode") -> None:
        super().__init__(reason)
        self.kind = kind


MODE_HINT = "pass --image-mode RGB (or RGBA) to keep colour, or --image-mode L to make every image grey"


class ModeChange(Exception):
    """An image in colour where every image is decoded as grey (L) because the first one was
    (``--image-mode`` not given): its colour would be dropped without a word. Not a bad file: the
    reader names it and says which ``--image-mode`` to choose."""


class TooLarge(Exception):
    """A file whose decoded size is more than an item may take (the reader says what to raise)."""

    def __init__(self, what: str, need: int) -> None:
        super().__init__(what)
        self.need = need


@dataclass(frozen=True)
class FileOptions:
    """The options of the files inputs (``--decode`` and what goes with it, ``--metadata``,
    ``--on-bad-file``), as :func:`~lovecraft_convert.inputs.open_reader` takes them (a dict)."""

    decode: str | None = None
    image_size: tuple[int, int] | None = None  # (width, height)
    resize: str = "shorter"
    image_mode: str | None = None
    sample_rate: int | None = None
    metadata: str | None = None
    on_bad_file: str = "error"

    @classmethod
    def from_dict(cls, d: dict | None) -> FileOptions:
        d = dict(d or {})
        if d.get("image_size") is not None:
            d["image_size"] = parse_image_size(d["image_size"])
        return cls(**d)

    def given(self) -> list[str]:
        """The flags given, as the user spelled them (for 'applies to files inputs only')."""
        out = []
        for name in ("decode", "image_size", "image_mode", "sample_rate", "metadata"):
            if getattr(self, name) is not None:
                out.append("--" + name.replace("_", "-"))
        if self.resize != "shorter":
            out.append("--resize")
        if self.on_bad_file != "error":
            out.append("--on-bad-file")
        return out


def parse_image_size(value) -> tuple[int, int]:
    """``224x224``, ``320x240`` (width x height), ``224`` (square), or a pair (width, height)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        w, h = value
    elif isinstance(value, int) and not isinstance(value, bool):
        w = h = value
    elif isinstance(value, str):
        text = value.lower().replace(" ", "")
        a, sep, b = text.partition("x")
        try:
            w = int(a)
            h = int(b) if sep else w
        except ValueError:
            raise OptionsError(f"--image-size {value!r}: give WIDTHxHEIGHT, e.g. 224x224") from None
    else:
        raise OptionsError(f"--image-size {value!r}: give WIDTHxHEIGHT, e.g. 224x224")
    if not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1 << 15 for x in (w, h)):
        raise OptionsError(f"--image-size {value!r}: each side must be 1 to 32768 pixels")
    return int(w), int(h)


def check_options(
    decode, image_size, resize, image_mode, sample_rate, metadata, on_bad_file
) -> dict[str, object] | None:
    """The files options validated (OptionsError naming the flag), as the dict the readers take, or
    None when none is given."""
    if decode is not None and decode not in DECODES:
        raise OptionsError(f"--decode {decode}: use image or audio")
    if resize not in RESIZES:
        raise OptionsError(f"--resize {resize}: use one of {', '.join(RESIZES)}")
    if image_mode is not None and image_mode not in MODES:
        raise OptionsError(f"--image-mode {image_mode}: use L, RGB or RGBA")
    if on_bad_file not in ON_BAD:
        raise OptionsError(f"--on-bad-file {on_bad_file}: use error or skip")
    size = parse_image_size(image_size) if image_size is not None else None
    if decode != "image":
        for flag, given in (
            ("--image-size", size is not None),
            ("--image-mode", image_mode is not None),
            ("--resize", resize != "shorter"),
        ):
            if given:
                raise OptionsError(f"{flag} goes with --decode image")
    if sample_rate is not None:
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or not 1 <= sample_rate <= 1_000_000:
            raise OptionsError(f"--sample-rate {sample_rate!r}: give a rate in Hz, e.g. 16000")
        if decode != "audio":
            raise OptionsError("--sample-rate goes with --decode audio")
    if metadata is not None and (not isinstance(metadata, str) or not metadata):
        raise OptionsError(f"--metadata {metadata!r}: give the path of a CSV or JSON Lines file")
    opts = FileOptions(decode, size, resize, image_mode, sample_rate, metadata, on_bad_file)
    if not opts.given():
        return None
    return {
        "decode": decode,
        "image_size": list(size) if size else None,
        "resize": resize,
        "image_mode": image_mode,
        "sample_rate": sample_rate,
        "metadata": metadata,
        "on_bad_file": on_bad_file,
    }


def mode_for(pil_mode: str) -> str:
    """The mode an image of ``pil_mode`` is converted to when ``--image-mode`` is not given: ``L``
    for one band of grey (1, L, I, I;16, F), ``RGBA`` for anything with alpha (LA, RGBA, PA, La,
    RGBa) or a palette (P: it may hold a transparent colour), ``RGB`` otherwise (RGB, CMYK, YCbCr,
    LAB, HSV)."""
    if pil_mode in ("1", "L", "I", "F") or pil_mode.startswith("I;"):
        return "L"  # (I, I;16 and F, of more than 8 bits, are then refused one by one)
    if "A" in pil_mode or "a" in pil_mode or pil_mode == "P":
        return "RGBA"
    return "RGB"


def _not_empty(data: bytes) -> None:
    if not data:
        raise BadFile("an empty file (0 bytes)")


def _decoded(data: bytes, limit: int):
    """A Pillow image, loaded (the first frame), refused past ``limit`` bytes of pixels."""
    from PIL import Image, UnidentifiedImageError

    _not_empty(data)
    try:
        im = Image.open(io.BytesIO(data))
        w, h = im.size
        need = w * h * max(len(im.getbands()), 3)  # converted to RGB(A) at worst
        if need > limit:
            bands = im.mode if len(im.getbands()) >= 3 else f"{im.mode}, counted as RGB: it may be converted"
            raise TooLarge(f"{w}x{h} pixels ({bands})", need)
        im.load()
    except TooLarge:
        raise
    except UnidentifiedImageError:  # its text holds the address of our buffer: said in words instead
        raise BadFile("not an image (no format Pillow reads)") from None
    except Exception as e:  # anything Pillow raises on a broken file (OSError, SyntaxError, ...)
        raise BadFile(f"cannot decode the image ({_reason(e)})") from None
    return im


def _reason(e: BaseException) -> str:
    # (soundfile names the object it read from: "Error opening <_io.BytesIO object at 0x7f...>:")
    text = " ".join(re.sub(r"<[^<>]* object at 0x[0-9a-f]+>", "the file", str(e)).split())
    return text or type(e).__name__


def probe_image(data: bytes, limit: int) -> tuple[tuple[int, int], str]:
    """(size, mode) of an image, for the shape of the column when the flags do not give it."""
    im = _decoded(data, limit)
    return im.size, im.mode


class ImageDecoder:
    """bytes -> ``uint8[H, W, C]`` (C 1, 3 or 4 for L, RGB, RGBA)."""

    def __init__(
        self, size: tuple[int, int], mode: str, resize: str | None, limit: int, first: str | None = None
    ) -> None:
        self.size = size
        self.mode = mode
        self.resize = resize  # None: no --image-size (every image must have ``size``)
        self.limit = limit
        self.channels = len(mode)
        self.first = first  # the first image's Pillow mode, when ``mode`` was taken from it

    @property
    def shape(self) -> tuple[int, int, int]:
        w, h = self.size
        return (h, w, self.channels)

    def __call__(self, data: bytes) -> np.ndarray:
        from PIL import Image, ImageOps

        im = _decoded(data, self.limit)
        if im.mode in ("I", "F") or im.mode.startswith("I;"):
            raise BadFile(
                f"is an image of mode {im.mode} (more than 8 bits a pixel): decoded pixels are 8-bit, and values above "
                "255 would be clipped; keep its bytes (leave out --decode) and decode it yourself"
            )
        if self.first is not None and self.mode == "L" and im.mode not in ("1", "L", "LA", "La"):
            raise ModeChange(
                f"is {im.mode}, but every image is decoded as L (grey), the mode of the first image "
                f"({self.first}): its colour would be dropped"
            )
        try:
            if im.mode != self.mode:  # Pillow's convert to the same mode is a copy of the whole image
                im = im.convert(self.mode)
        except Exception as e:
            raise BadFile(f"cannot convert the image from {im.mode} to {self.mode} ({_reason(e)})") from None
        if im.size != self.size:
            bilinear = Image.Resampling.BILINEAR
            if self.resize is None:
                w, h = im.size
                raise BadFile(
                    f"is {w}x{h}, not {self.size[0]}x{self.size[1]} as the first image "
                    "(give --image-size WxH to resize every image)"
                )
            if self.resize == "shorter":
                im = ImageOps.fit(im, self.size, bilinear)
            elif self.resize == "fit":
                im = ImageOps.pad(im, self.size, bilinear, color=0)
            elif self.resize == "stretch":
                im = im.resize(self.size, bilinear)
            else:  # crop: the central box at the image's own scale
                out = Image.new(self.mode, self.size, 0)
                out.paste(im, ((self.size[0] - im.size[0]) // 2, (self.size[1] - im.size[1]) // 2))
                im = out
        arr = np.asarray(im, dtype=np.uint8)
        return arr.reshape(self.shape)

    def describe(self) -> dict:
        from PIL import __version__

        return {
            "decode": "image",
            "size": list(self.size),
            "shape": list(self.shape),
            "mode": self.mode,
            "resize": self.resize,
            "filter": FILTER,
            "decoder": f"Pillow {__version__}",
        }


def _soundfile():
    from ..errors import need

    return need("soundfile", "--decode audio", "pip install 'lovecraft-convert[audio]'")


def probe_audio(data: bytes) -> int:
    """The sample rate of a clip (the default --sample-rate)."""
    _not_empty(data)
    sf = _soundfile()
    try:
        return int(sf.info(io.BytesIO(data)).samplerate)
    except Exception as e:  # anything libsndfile reports on a broken file
        raise BadFile(f"cannot decode the audio ({_reason(e)})") from None


class AudioDecoder:
    """bytes -> float32 mono samples at ``rate`` Hz."""

    def __init__(self, rate: int, limit: int) -> None:
        self.rate = rate
        self.limit = limit

    def __call__(self, data: bytes) -> np.ndarray:
        from .resample import resample

        _not_empty(data)
        sf = _soundfile()
        try:
            with sf.SoundFile(io.BytesIO(data)) as f:
                frames, channels, rate = f.frames, f.channels, f.samplerate
                need = frames * channels * 4 + (-(-frames * self.rate // rate)) * 4
                if need > self.limit:
                    raise TooLarge(f"{frames} frames of {channels} channels at {rate} Hz", need)
                x = f.read(dtype="float32", always_2d=True)
        except TooLarge:
            raise
        except Exception as e:  # anything libsndfile reports on a broken file
            raise BadFile(f"cannot decode the audio ({_reason(e)})") from None
        mono = x[:, 0] if x.shape[1] == 1 else x.mean(axis=1, dtype=np.float32)
        return resample(mono, int(rate), self.rate)

    def describe(self) -> dict:
        from .resample import describe

        sf = _soundfile()
        return {
            "decode": "audio",
            "sample_rate": self.rate,
            "channels": "mono (channels averaged)",
            "resampler": describe(),
            "decoder": f"soundfile {sf.__version__} (libsndfile {sf.__libsndfile_version__})",
        }


def ordered_map(pool, fn, items, depth: int):
    """``map(fn, items)`` on a thread pool, in order, at most ``depth`` calls submitted ahead of the
    one consumed (bounded memory); calls not yet started are cancelled when the consumer leaves."""
    from collections import deque

    if pool is None:
        yield from map(fn, items)
        return
    q: deque = deque()
    try:
        for item in items:
            q.append(pool.submit(fn, item))
            if len(q) >= depth:
                yield q.popleft().result()
        while q:
            yield q.popleft().result()
    finally:
        for f in q:
            f.cancel()


def thread_pool(wanted: bool):
    """(a pool of one thread per core this process may use, its threads) when ``wanted`` and there
    are several cores, else (None, 1); the caller shuts the pool down."""
    import os

    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    if not wanted or n < 2:
        return None, 1
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(n, thread_name_prefix="lovecraft-decode"), n


class Skipped:
    """Files (or samples) left out by ``--on-bad-file skip``: counted by reason, the first few named;
    what the manifest's ``skipped_files`` holds."""

    FIRST = 10

    def __init__(self) -> None:
        self.count = 0
        self.by_reason: dict[str, int] = {}
        self.first: list[list[str]] = []

    def add(self, name: str, kind: str, reason: str) -> None:
        self.count += 1
        self.by_reason[kind] = self.by_reason.get(kind, 0) + 1
        if len(self.first) < self.FIRST:
            # a name that is not UTF-8 spelled as the error line spells it (bad\xffname.png), not
            # with lone surrogates, which strict JSON readers of the manifest refuse
            self.first.append([name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), reason])

    def to_dict(self) -> dict:
        return {"count": self.count, "by_reason": dict(self.by_reason), "first": [list(x) for x in self.first]}

    def merge(self, d: dict) -> None:
        self.count += int(d.get("count", 0))
        for k, v in (d.get("by_reason") or {}).items():
            self.by_reason[k] = self.by_reason.get(k, 0) + int(v)
        self.first.extend(d.get("first", [])[: self.FIRST - len(self.first)])

    def note(self, noun: str = "file") -> list[str]:
        """The summary's note, when anything was skipped."""
        if not self.count:
            return []
        nouns = noun if self.count == 1 else noun + "s"
        return [f"skipped {self.count} {nouns} (--on-bad-file skip): {self.listing()}"]

    def listing(self) -> str:
        """The first skipped, each with its reason, and how many more."""
        shown = ", ".join(f"{p} ({r})" for p, r in self.first[:3])
        return shown + (f" and {self.count - 3} more" if self.count > 3 else "")
