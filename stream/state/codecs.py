"""Compact binary forms of beliefs, one codec per rating system.

Why here and not in the systems: the rating math only sees float64 arrays; how a
belief is laid out in Redis (and in the embedded in-memory store, which uses the
same codec so that the service and the replay stay bit-identical) is a storage
decision. A codec must be deterministic; ``lossless`` says whether
``decode(encode(b))`` returns ``b`` bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from stream.ratings.base import Belief


class Codec(Protocol):
    name: str
    lossless: bool

    def encode(self, belief: Belief) -> bytes: ...

    def decode(self, data: bytes) -> Belief: ...


class Float64Codec:
    """Lossless: the belief's float64 values, little-endian, with a one-byte version tag."""

    name = "f64"
    lossless = True
    _TAG = b"\x01"

    def encode(self, belief: Belief) -> bytes:
        return self._TAG + np.ascontiguousarray(belief, dtype="<f8").tobytes()

    def decode(self, data: bytes) -> Belief:
        if data[:1] != self._TAG:
            raise ValueError(f"not an f64 belief (tag {data[:1]!r})")
        return np.frombuffer(data, dtype="<f8", offset=1).astype(np.float64)


_FACTORIES: dict[str, Callable[[], Codec]] = {}


def register_codec(system_name: str, factory: Callable[[], Codec]) -> None:
    """Systems with a smarter encoding (e.g. Cowan's windowed distributions) register it."""
    _FACTORIES[system_name] = factory


def codec_for(system_name: str) -> Codec:
    """The codec a system's beliefs are stored with (lossless float64 unless registered)."""
    if system_name == "cowan":
        # imported lazily so that Elo-MMR users never import Cowan's kernels
        import stream.state.cowan_codec  # noqa: F401
    factory = _FACTORIES.get(system_name)
    return factory() if factory is not None else Float64Codec()
