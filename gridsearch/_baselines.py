"""The store's char n-gram baselines, computed beside the search rather than before it.

A search holds its best trials against the store's baselines (``trainables.baselines``),
computed once per store and cached beside it. Read from that cache they are known at
once. Otherwise (about a minute for the embedded world, most of it on one core: the
n-gram counts are pure Python and SentEval's classifiers run on one torch thread) they
are computed by ``python -m trainables.baselines`` in a process of their own while the
C++ recurrence is built, Ray starts and the first trials train, so that the first trial
does not wait for them; the search waits for them, if at all, when its trials are done,
before its summary holds the best trials against them. They go into the parent run
(``baselines.json``, which the report draws) once known: at its start when read from
the cache, else at the search's end. A search stopped by a signal does not wait for
them: the process is ended with the search (the next search on the store computes them
again). One that cannot compute them says why in one line and goes on: a search never
fails for them.

A process, not a thread of the driver: Ray starts its processes with a ``preexec_fn``
(a fork that runs Python in the child), and a fork while another thread is inside
OpenBLAS (the ridge's solve) hangs the driver in ``ray.init``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from gridsearch._inputs import store_size
from gridsearch._voice import Voice
from storage import StoreError
from trainables.baselines import BASELINES_FILE, cached_baselines, from_json

__all__ = ["COMPUTING", "StoreBaselines"]

Table = dict[str, dict[str, float]]  # by baseline, metric -> value

# said as the baselines start (a minute or more: the search says what runs beside it)
COMPUTING = "baselines: computing the store's char n-gram baselines once"
SKIPS = "--no-baselines skips them"


class StoreBaselines:
    """The store's baselines, known now (read from the cache) or being computed by a
    process of their own (the module docstring); ``start`` makes one, ``known`` and
    ``wait`` read it, ``stop`` ends the process if it still runs."""

    def __init__(self, table: Table | None = None) -> None:
        self._table = table
        self._done = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._stopped = False  # ended by ``stop``
        if table is not None:
            self._done.set()

    @classmethod
    def start(cls, store: str, senteval: str | None, voice: Voice) -> StoreBaselines | None:
        """The store's baselines: read from its cache, else started in a process of
        their own (with a line saying so, and one when they are known); None, with a
        line saying why, when even the cache cannot be read."""
        try:
            cached = cached_baselines(store, senteval)
        except (StoreError, OSError, ValueError) as err:
            voice(f"baselines: not computed ({err}); {SKIPS}")
            return None
        if cached is not None:
            return cls(cached)
        baselines = cls()
        key = f"baselines {store_size(store)}"
        voice(
            f"{COMPUTING}, beside the first trials ({voice.expected(voice.estimate(key))}; "
            f"cached beside the store; {SKIPS})"
        )
        sets = ["--senteval", senteval] if senteval is not None else []
        began = time.perf_counter()
        try:  # its own session: a Ctrl+C at the terminal is the driver's to handle (``stop``)
            process = subprocess.Popen(
                [sys.executable, "-m", "trainables.baselines", "--data", store, "--json", *sets],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as err:
            voice(f"baselines: not computed ({err}); {SKIPS}")
            return None
        baselines._process = process
        threading.Thread(
            target=baselines._collect,
            args=(process, store, senteval, voice, key, began),
            name="store-baselines",
            daemon=True,
        ).start()
        return baselines

    def _collect(
        self,
        process: subprocess.Popen[str],
        store: str,
        senteval: str | None,
        voice: Voice,
        key: str,
        began: float,
    ) -> None:
        """The process's answer, once it ends: the table, or the line that says why not."""
        try:
            out, err = process.communicate()
            if self._stopped:  # ended by ``stop``: nothing to say
                return
            if process.returncode < 0:  # killed by someone else (the kernel's OOM killer)
                err += f"\nended by signal {-process.returncode}"
            if process.returncode != 0:
                lines = err.strip().splitlines() or [f"exit status {process.returncode}"]
                why = lines[-1].removeprefix("error: ")
                voice(f"baselines: not computed ({why}); {SKIPS}")
                return
            table = from_json(json.loads(out))
            seconds = time.perf_counter() - began
            if voice.times is not None:
                voice.times.record(key, seconds)
            cached = cached_baselines(store, senteval) is not None
            where = f"cached in its {BASELINES_FILE}" if cached else f"{BASELINES_FILE} not written"
            voice(f"baselines: computed once for this store in {seconds:.0f} s ({where}; {SKIPS})")
            self._table = table
        except Exception as err:  # an answer that is not the table: said, and left out
            voice(f"baselines: not computed ({type(err).__name__}: {err}); {SKIPS}")
        finally:
            self._done.set()

    def known(self) -> Table | None:
        """The baselines if they are known now (None: being computed, or not computed)."""
        return self._table if self._done.is_set() else None

    def wait(self, voice: Voice) -> Table | None:
        """The baselines, once computed (waited for, saying so); None where they could
        not be."""
        if not self._done.is_set():
            what = "waiting for the store's char n-gram baselines"
            with voice.phase(what, say=f"baselines: the trials are done; {what}"):
                self._done.wait()
        return self._table

    def stop(self) -> None:
        """The process ended if it still runs (a search that stops does not wait)."""
        process = self._process
        if process is not None and process.poll() is None:
            self._stopped = True
            process.kill()
            process.wait()
