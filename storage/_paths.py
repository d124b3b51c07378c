"""Checks on file and directory names read from data files, before they reach a filesystem.

Manifests, Karpathy JSON files and ``suite.json`` name files relative to a directory the
user chose (the store, ``--images``, ``--senteval``). A name that climbs out of it
(``..``, an absolute path) would let a data file make this code read, or a build
write, anywhere the process can; so every such name is checked when its file is parsed,
and the error names the file, the field and what was expected.

The checks are lexical, on the text alone: they never call ``resolve()``. That keeps
them the same on every filesystem (object stores have no symlinks or ``..``), and it
means a symlink *inside* the directory is followed when the file is opened: such a link
was put there by whoever owns the directory, who is trusted as much as the directory
argument itself (a COCO ``--images`` tree whose ``train2014`` links to a shared disk is
the common case). What a data file cannot do is name a path outside its directory.

Example::

    >>> path_problem("val2014/COCO_val2014_000000000042.jpg") is None
    True
    >>> path_problem("../../etc/passwd")
    "has a '..' segment"
    >>> name_problem("STS12") is None, name_problem("a/b")
    (True, "contains '/'")
"""

from __future__ import annotations

import re

# Names that become one file or directory name: a letter or digit first, then letters,
# digits, '.', '_' or '-' (every official SentEval name and every split name fits).
NAME_RULE = "letters, digits, '.', '_' and '-', starting with a letter or a digit, without '..'"
_NAME_START = re.compile(r"[A-Za-z0-9]")
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]")
_DRIVE = re.compile(r"[A-Za-z]:")  # 'C:...' is absolute where the path may be read on Windows
# The temporary names of _atomic.write_bytes_atomic and _fs.Location.write_bytes.
_TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{32}\.tmp")


def path_problem(text: str) -> str | None:
    """Why ``text`` is not a relative, ``/``-separated path that stays inside its
    directory (a phrase to follow "which"), or ``None`` when it is one."""
    if text == "":
        return "is empty"
    if "\x00" in text:
        return "contains a NUL character"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "contains a control character"
    if "\\" in text:
        return "contains a backslash (separate directories with '/')"
    if text.startswith("/") or _DRIVE.match(text):
        return "is an absolute path"
    segments = text.split("/")
    if ".." in segments:
        return "has a '..' segment"
    if "." in segments:
        return "has a '.' segment"
    if "" in segments:
        return "has an empty segment ('//' or a trailing '/')"
    return None


def name_problem(text: str) -> str | None:
    """Why ``text`` is not a plain file or directory name (see :data:`NAME_RULE`), or
    ``None`` when it is one."""
    problem = path_problem(text)
    if problem is not None:
        return problem
    if "/" in text:
        return "contains '/'"
    if ".." in text:
        return "contains '..'"
    if _NAME_START.match(text) is None:
        return "does not start with a letter or a digit"
    bad = _NAME_BAD.search(text)
    if bad is not None:
        return f"contains {bad.group()!r}"
    return None


def is_temp_name(name: str) -> bool:
    """Whether the file name ``name`` is a temporary name of the atomic writers
    (``.<final name>.<32 hex digits>.tmp``): a killed process can leave one behind."""
    return _TEMP_NAME.fullmatch(name) is not None
