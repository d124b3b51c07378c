"""Opening local files that must be regular files, without ever blocking on anything else.

A FIFO named like an image or a JSON file would make a plain ``open()`` wait forever for
a writer, and a device (``/dev/zero``) would be read without end. So a data file is
opened without blocking and checked with ``fstat`` on the open descriptor (no window
between the check and the read), and anything but a regular file is refused, naming what
it is. Symbolic links are followed: the directories they sit in are the user's own (see
``storage._paths``).

Example::

    >>> import os, tempfile
    >>> fifo = os.path.join(tempfile.mkdtemp(), "x.jpg")
    >>> os.mkfifo(fifo)
    >>> try:
    ...     open_regular(fifo)
    ... except NotRegularFileError as err:
    ...     print(err.strerror)
    not a regular file: it is a FIFO
    >>> os.unlink(fifo)
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from storage._errors import MissingFileError, StoreError, os_reason

__all__ = ["NotRegularFileError", "file_kind", "open_regular", "read_regular"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


class NotRegularFileError(OSError):
    """The path exists but is a directory, FIFO, socket or device, not a regular file."""


def file_kind(mode: int) -> str:
    """What a ``st_mode`` describes, as a phrase: ``"a FIFO"``, ``"a directory"``..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "not a file"


def _refuse(path: str | os.PathLike[str], mode: int) -> NotRegularFileError:
    reason = f"not a regular file: it is {file_kind(mode)}"
    return NotRegularFileError(errno.EINVAL, reason, os.fspath(path))


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular file (after symbolic links).

    Raises :class:`NotRegularFileError` for anything else, before reading it, and the
    usual ``OSError`` subclasses (``FileNotFoundError``, ``PermissionError``...).
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):  # never open a device, socket or FIFO at all
        raise _refuse(path, mode)
    # O_NONBLOCK: should the file become a FIFO after the check, open still returns.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of the regular file ``path``; any failure is a :class:`StoreError`
    naming ``path`` and saying it was read as ``what`` (``"the Karpathy JSON"``)."""
    try:
        with open_regular(path) as handle:
            return handle.read()
    except FileNotFoundError:
        raise MissingFileError(f"{path}: cannot read {what} (no such file)") from None
    except OSError as err:
        raise StoreError(f"{path}: cannot read {what} ({os_reason(err)})") from None
