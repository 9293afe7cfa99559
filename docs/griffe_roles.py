"""A griffe extension for the API reference: the library's docstrings use reStructuredText roles
(``:func:`convert```, ``:class:`~.mixture.Mixture```), which Markdown would print as they are; this
turns each into a code span of the name (the last dotted part for a ``~`` reference)."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")
LITERAL = re.compile(r"``([^`]+)``")


def _name(m: re.Match) -> str:
    target = m.group(2)
    return f"`{target.rsplit('.', 1)[-1] if m.group(1) else target.lstrip('.')}`"


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:  # griffe calls it for every object it loads
        if obj.docstring is not None:
            text = ROLE.sub(_name, obj.docstring.value)
            obj.docstring.value = LITERAL.sub(r"`\1`", text)
