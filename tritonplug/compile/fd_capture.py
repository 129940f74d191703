"""What native code prints while Triton compiles, captured so that a failure can quote it.

MLIR reports a failed verification or pass as ``k.py:12:5: error: ...`` on the process's file
descriptor 2 (and Triton's front end prints the whole module to descriptor 1 before it raises a bare
``RuntimeError("error encountered during parsing")``), where no Python code sees it. Compile workers
capture their descriptors already; :class:`Captured` does the same around a front end or an in-process
compile: descriptors 1 and 2 go to temporary files, one capture at a time (a lock), and what was
written is replayed to the real descriptors unless the caller drops it (the failure quotes it instead).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from types import TracebackType
from typing import IO

_LOCK = threading.RLock()


class Captured:
    """``with Captured() as out:`` … ``out.stderr`` (after the block); ``out.drop()`` keeps it from being
    replayed. Nested captures in one thread leave the outer one in charge."""

    def __init__(self) -> None:
        self.stdout = ""
        self.stderr = ""
        self._replay = True
        self._saved: list[int] = []
        self._files: list[IO[bytes]] = []

    def drop(self) -> None:
        self._replay = False

    def __enter__(self) -> Captured:
        _LOCK.acquire()
        try:
            _flush()
            self._files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
            self._saved = [os.dup(1), os.dup(2)]
            for fd, file in zip((1, 2), self._files, strict=True):
                os.dup2(file.fileno(), fd)
        except OSError:  # no descriptors 1 and 2 (a daemon): nothing to capture
            self._restore()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            _flush()
            texts = []
            for file in self._files:
                file.seek(0)
                texts.append(file.read().decode(errors="replace"))
            self._restore()
            if texts:
                self.stdout, self.stderr = texts
            if self._replay:
                for fd, text in ((1, self.stdout), (2, self.stderr)):
                    if text:
                        with contextlib.suppress(OSError):
                            os.write(fd, text.encode())
        finally:
            _LOCK.release()

    def _restore(self) -> None:
        for fd, saved in zip((1, 2), self._saved, strict=False):
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
            with contextlib.suppress(OSError):
                os.close(saved)
        for file in self._files:
            with contextlib.suppress(OSError):
                file.close()
        self._saved, self._files = [], []


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
