"""The dataset manifest (``_manifest.json``): reading it back."""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import DatasetError
from .output import MANIFEST


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of dataset directory ``path``; DatasetError when it is missing or unreadable."""
    mpath = os.path.join(path, MANIFEST)
    if not os.path.isfile(mpath):
        raise DatasetError(
            f"{path}: no {MANIFEST}; not a lovecraft dataset, or its writing did not finish",
            hint="give the output directory of a completed `lovecraft convert`/`shard` run",
        )
    try:
        with open(mpath, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{mpath}: unreadable manifest ({e})", hint="re-create the dataset") from None
    if not isinstance(m, dict) or m.get("format") != "lovecraft-dataset":
        raise DatasetError(f"{mpath}: not a lovecraft dataset manifest", hint="give a directory lovecraft wrote")
    return m
