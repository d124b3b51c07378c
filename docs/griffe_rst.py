"""A griffe extension (``extensions:`` of mkdocstrings in mkdocs.yml) for the API
reference: some docstrings of the packages use reStructuredText's cross-reference roles
(``:class:`Trainer```) and literal-block markers (``Example::``), which Markdown would
show as written. The reference renders them as meant: a role as its name in code, a
marker as a colon (the indented block after it is a code block in Markdown already).
The docstrings themselves are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|data|meth|attr|mod|exc|obj):`~?([^`]+)`")
EXPANDED = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)  # "Example::" reads "Example:"
QUIET = re.compile(r"[ \t]*::[ \t]*$", re.MULTILINE)  # "text ::" or a lone "::" reads as nothing


def markdown(text: str) -> str:
    """``text`` with its roles as code spans and its ``::`` markers as RST reads them."""
    return QUIET.sub("", EXPANDED.sub(":", ROLE.sub(r"`\1`", text)))


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _objects(member)
    return found


class ReStructuredText(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = markdown(obj.docstring.value)
