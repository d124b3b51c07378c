"""Local paths and pyarrow filesystem URIs behind one small interface.

Cluster nodes read stores from shared storage, so every store path may be a local
path or any URI pyarrow's filesystems understand (``file://``, ``s3://``, ``gs://``,
``hdfs://``). Writes go to a temporary name and are moved into place, so a reader
never sees a half-written file.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs


@dataclass(frozen=True)
class Location:
    """A directory on some filesystem."""

    fs: pafs.FileSystem
    root: str  # the directory's path on ``fs`` (no trailing slash)
    uri: str  # what the user gave, for messages

    @classmethod
    def parse(cls, where: str | os.PathLike[str]) -> Location:
        text = os.fspath(where)
        if "://" in text:
            fs, path = pafs.FileSystem.from_uri(text)
            return cls(fs, path.rstrip("/") or "/", text)
        return cls(pafs.LocalFileSystem(), os.path.abspath(text), text)

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, relative: str) -> str:
        """The filesystem path of ``relative`` (a store-relative, '/'-separated path)."""
        return posixpath.join(self.root, relative)

    def display(self, relative: str) -> str:
        """A path for messages, in the form the user wrote the location."""
        return posixpath.join(self.uri.rstrip("/"), relative)

    def exists(self, relative: str) -> bool:
        return self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound

    def read_bytes(self, relative: str) -> bytes:
        with self.fs.open_input_stream(self.path(relative)) as stream:
            return bytes(stream.readall())

    def read_buffer(self, relative: str) -> pa.Buffer:
        """The whole file as one buffer without a copy: memory-mapped when local (so a
        checksum and a Parquet decode of it read the disk once), read once otherwise."""
        if self.is_local:
            with pa.memory_map(self.path(relative)) as mapped:
                return mapped.read_buffer()
        with self.fs.open_input_stream(self.path(relative)) as stream:
            return stream.readall()

    def write_bytes(self, relative: str, data: bytes) -> None:
        """Write ``data`` under a temporary name, then move it onto ``relative``."""
        final = self.path(relative)
        parent = posixpath.dirname(final)
        self.fs.create_dir(parent, recursive=True)
        tmp = posixpath.join(parent, f".{posixpath.basename(final)}.{uuid.uuid4().hex}.tmp")
        try:
            with self.fs.open_output_stream(tmp) as stream:
                stream.write(data)
            self.fs.move(tmp, final)
        except BaseException:
            if self.fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                self.fs.delete_file(tmp)
            raise

    def delete(self, relative: str) -> None:
        if self.exists(relative):
            self.fs.delete_file(self.path(relative))

    def list_files(self, relative: str) -> list[str]:
        """Store-relative paths of the regular files directly under ``relative``."""
        selector = pafs.FileSelector(self.path(relative), allow_not_found=True)
        base = self.root.rstrip("/") + "/"
        return sorted(
            info.path[len(base) :]
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
        )
