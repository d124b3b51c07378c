"""Local paths and pyarrow filesystem URIs behind one small interface.

Cluster nodes read stores from shared storage, so every store path may be a local
path or any URI pyarrow's filesystems understand (``file://``, ``s3://``, ``gs://``,
``hdfs://``). Writes go to a temporary name and are moved into place, so a reader
never sees a half-written file.

Every failure of the filesystem (an unreachable bucket, a permission, a file where a
directory should be) becomes a :class:`StoreError` naming the path, and only regular
files are ever read (a FIFO named ``manifest.json`` would block a reader forever).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import posixpath
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from storage._errors import MissingFileError, StoreError, os_reason
from storage._files import open_regular

# What pyarrow raises when a filesystem fails: OSError (ArrowIOError), ArrowInvalid (a
# ValueError), and the rest of its hierarchy (ArrowNotImplementedError...).
_FS_ERRORS = (OSError, ValueError, pa.ArrowException)


@dataclass(frozen=True)
class Location:
    """A directory on some filesystem."""

    fs: pafs.FileSystem
    root: str  # the directory's path on ``fs`` (no trailing slash)
    uri: str  # what the user gave, for messages

    @classmethod
    def parse(cls, where: str | os.PathLike[str]) -> Location:
        text = os.fspath(where)
        if not text.strip():
            raise StoreError(
                f"store location {text!r}: expected a directory path or a URI "
                "(file://, s3://, gs://, hdfs://)"
            )
        if "://" not in text:
            return cls(pafs.LocalFileSystem(), os.path.abspath(text), text)
        try:
            # Some filesystems' native libraries (libhdfs looking for a JVM) print to
            # the process's stderr; the error below says what went wrong instead.
            with _native_stderr_kept_on_success():
                fs, path = pafs.FileSystem.from_uri(text)
        except _FS_ERRORS as err:
            raise StoreError(f"{text}: cannot open this location ({os_reason(err)})") from None
        return cls(fs, path.rstrip("/") or "/", text)

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, relative: str) -> str:
        """The filesystem path of ``relative`` (a store-relative, '/'-separated path)."""
        return posixpath.join(self.root, relative) if relative else self.root

    def display(self, relative: str) -> str:
        """A path for messages, in the form the user wrote the location (a URI's query,
        ``?region=...``, stays at the end)."""
        if not relative:
            return self.uri
        base, mark, query = self.uri.partition("?") if "://" in self.uri else (self.uri, "", "")
        return posixpath.join(base.rstrip("/"), relative) + mark + query

    @contextlib.contextmanager
    def _failing(self, relative: str, action: str) -> Iterator[None]:
        """Turn a filesystem error inside the block into a StoreError naming ``relative``."""
        try:
            yield
        except StoreError:
            raise
        except FileNotFoundError:
            raise MissingFileError(
                f"{self.display(relative)}: cannot {action} (no such file or directory)"
            ) from None
        except _FS_ERRORS as err:
            where = self.display(relative)
            raise StoreError(f"{where}: cannot {action} ({os_reason(err)})") from None

    def file_type(self, relative: str) -> pafs.FileType:
        """What is at ``relative``: ``File``, ``Directory``, ``NotFound`` or ``Unknown``
        (pyarrow's word for a FIFO, socket or device)."""
        with self._failing(relative, "look it up"):
            return self.fs.get_file_info(self.path(relative)).type

    def exists(self, relative: str) -> bool:
        return self.file_type(relative) != pafs.FileType.NotFound

    def read_bytes(self, relative: str) -> bytes:
        return self.read_buffer(relative).to_pybytes()

    def read_buffer(self, relative: str) -> pa.Buffer:
        """The whole regular file as one buffer without a copy: memory-mapped when local
        (so a checksum and a Parquet decode of it read the disk once), read once
        otherwise."""
        with self._failing(relative, "read it"):
            if self.is_local:
                with open_regular(self.path(relative)) as handle:
                    if os.fstat(handle.fileno()).st_size == 0:
                        return pa.py_buffer(b"")
                    return pa.py_buffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
            kind = self.fs.get_file_info(self.path(relative)).type
            if kind == pafs.FileType.NotFound:
                raise FileNotFoundError(relative)
            if kind != pafs.FileType.File:
                raise StoreError(f"{self.display(relative)}: cannot read it (not a file)")
            with self.fs.open_input_stream(self.path(relative)) as stream:
                return stream.readall()

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write ``data`` under a temporary name, then move it onto ``relative``."""
        final = self.path(relative)
        parent = posixpath.dirname(final)
        tmp = posixpath.join(parent, f".{posixpath.basename(final)}.{uuid.uuid4().hex}.tmp")
        with self._failing(relative, "write it"):
            self.fs.create_dir(parent, recursive=True)
            try:
                with self.fs.open_output_stream(tmp) as stream:
                    stream.write(data)
                self.fs.move(tmp, final)
            except BaseException:
                with contextlib.suppress(*_FS_ERRORS):
                    if self.fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                        self.fs.delete_file(tmp)
                raise

    def delete(self, relative: str) -> None:
        with self._failing(relative, "delete it"):
            if self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound:
                self.fs.delete_file(self.path(relative))

    def list_files(self, relative: str) -> list[str]:
        """Store-relative paths of the regular files directly under ``relative``."""
        return sorted(p for p, kind in self._entries(relative) if kind == pafs.FileType.File)

    def list_entries(self, relative: str) -> list[str]:
        """Store-relative paths of everything directly under ``relative``."""
        return sorted(p for p, _ in self._entries(relative))

    def _entries(self, relative: str) -> list[tuple[str, pafs.FileType]]:
        selector = pafs.FileSelector(self.path(relative), allow_not_found=True)
        base = self.root.rstrip("/") + "/"
        with self._failing(relative, "list it"):
            infos = self.fs.get_file_info(selector)
        return [(info.path[len(base) :], info.type) for info in infos]


@contextlib.contextmanager
def _native_stderr_kept_on_success() -> Iterator[None]:
    """Hold back what native code writes to file descriptor 2 inside the block: it is
    written out when the block succeeds and dropped when it raises."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable descriptor 2: nothing to hold back
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        held = sink.read()
        if held:
            os.write(2, held)
