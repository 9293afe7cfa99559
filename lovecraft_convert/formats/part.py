"""What every part of a format's descriptor shares: the format's name, its one-line title and its
data files' extensions (:mod:`.writing`, :mod:`.reading`, :mod:`.checking`, :mod:`.describing`)."""

from __future__ import annotations


class FormatPart:
    """The attributes every part of a descriptor reads."""

    name: str = ""
    title: str = ""  # one line for help and inspect
    extensions: tuple[str, ...] = ()  # of its data files, used to find a unit's file among others
