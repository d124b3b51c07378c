"""The rest of a child process's output, for tests that read some of its lines first.

``Popen.communicate(timeout=...)`` reads the pipes' descriptors directly: what the test's
line reads had already pulled into the streams' buffers (a line printed in the same
instant as the one waited for) is lost. ``finish`` reads the rest through the same
streams."""

from __future__ import annotations

import subprocess
import threading

__all__ = ["finish"]


def finish(process: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
    """``process``'s exit, then the rest of its stdout and stderr (each "" where it was not
    a pipe), read through the buffered streams; killed after ``timeout_s``."""
    rest = {"stdout": "", "stderr": ""}

    def read(name: str) -> None:
        stream = getattr(process, name)
        if stream is not None:
            rest[name] = stream.read()

    readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in rest]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for reader in readers:
        reader.join(timeout=60)  # a grandchild holding the pipe open: give up on it
    return rest["stdout"], rest["stderr"]
