"""The format interface in four small parts (formats/protocols.py): every registered format offers
each, the composite descriptor offers nothing outside them, and each part stays small."""

from __future__ import annotations

import inspect

import pytest

from lovecraft_convert.formats import get, names
from lovecraft_convert.formats.base import OutputFormat
from lovecraft_convert.formats.checking import CheckingPart
from lovecraft_convert.formats.describing import DescribingPart
from lovecraft_convert.formats.part import FormatPart
from lovecraft_convert.formats.protocols import PROTOCOLS, Checks, Describes, Reads, Writes
from lovecraft_convert.formats.reading import ReadingPart
from lovecraft_convert.formats.writing import WritingPart

PARTS = {Writes: WritingPart, Reads: ReadingPart, Checks: CheckingPart, Describes: DescribingPart}
MOST_METHODS = 8  # a part with more is two parts


def _members(proto) -> set[str]:
    """What a protocol names: its methods and its attributes."""
    own = {n for n, v in vars(proto).items() if not n.startswith("_") and callable(v)}
    return own | set(getattr(proto, "__annotations__", {}))


@pytest.mark.parametrize("name", names())
def test_every_format_offers_the_four_protocols(name):
    fmt = get(name)
    for proto in PROTOCOLS:
        assert isinstance(fmt, proto), f"{name} lacks a member of {proto.__name__}"


@pytest.mark.parametrize("proto", PROTOCOLS, ids=lambda p: p.__name__)
def test_each_part_gives_the_defaults_of_its_protocol_and_stays_small(proto):
    part = PARTS[proto]
    missing = [m for m in _members(proto) if not hasattr(part, m)]
    assert missing == [], f"{part.__name__} has no default for {missing}"
    methods = [n for n, v in vars(part).items() if inspect.isfunction(v)]
    assert 0 < len(methods) <= MOST_METHODS


def test_the_composite_offers_nothing_outside_the_protocols():
    """Anything a command calls on a descriptor is in one of the four: a member added to the
    composite alone (widening it again) fails here."""
    offered = set().union(*(_members(p) for p in PROTOCOLS))
    public = {n for n in dir(OutputFormat) if not n.startswith("_")}
    assert public - offered == set()
    shared = {n for n in vars(FormatPart) if not n.startswith("_")}
    assert shared == {"name", "title", "extensions"}


def test_a_format_missing_a_part_is_not_a_checker():
    class WriteOnly(WritingPart, ReadingPart):
        name = "writeonly"

    fmt = WriteOnly()
    assert isinstance(fmt, Writes) and isinstance(fmt, Reads)
    assert not isinstance(fmt, Checks) and not isinstance(fmt, Describes)
