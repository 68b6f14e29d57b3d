"""A file's bytes counted as they are read from disk, for a progress bar with a total.

Why bytes on disk: their total is known before reading (the file's size), whatever the format or
compression, where the number of events is not; counted below the decompressor, a ``.xz`` history
advances by its compressed bytes, so the bar reaches its total exactly at the file's end.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any


class CountingRaw(io.RawIOBase):
    """A binary file that reports the size of each read to ``counted``."""

    def __init__(self, raw: Any, counted: Callable[[int], None]) -> None:
        super().__init__()
        self._raw = raw
        self._counted = counted

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        n: int | None = self._raw.readinto(buffer)
        if n:
            self._counted(n)
        return n

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def open_counted(path: str, counted: Callable[[int], None]) -> io.BufferedReader:
    """``path`` opened for buffered binary reading, each read from disk reported to ``counted``."""
    return io.BufferedReader(CountingRaw(open(path, "rb", buffering=0), counted))


__all__ = ["CountingRaw", "open_counted"]
