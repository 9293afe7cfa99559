"""``verify``: prove a dataset directory holds what its manifest says, and with ``against`` that it
holds the records of its source. See :mod:`.checker`."""

from __future__ import annotations

from .checker import verify
from .report import Problem, Report

__all__ = ["Problem", "Report", "verify"]
