"""Write-then-rename helpers so that no reader ever sees a half-written file."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory.

    ``os.replace`` is atomic on POSIX, so ``path`` either keeps its old content or
    holds all of ``data``. A process killed mid-write leaves at most a uniquely named
    ``.<name>.<hex>.tmp`` file beside it; the builds remove such files when they resume
    (``storage._paths.is_temp_name``).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    # os.open with 0o666 honours the umask (mkstemp would make every file 0600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 ``text`` atomically (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (see :func:`write_bytes_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
