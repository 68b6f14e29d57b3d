"""Compact binary forms of beliefs, one codec per rating system.

Why apart from the systems: the rating math only sees float64 arrays; how a belief is laid out in
Redis and the embedded store (the same codec, so the service and the replay stay bit-identical) is
a storage decision. ``lossless``: ``decode(encode(b))`` is ``b`` bit for bit. ``decode_many`` /
``encode_many`` give exactly the per-item results (bytes, values and errors) in one call.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from itertools import pairwise

import numpy as np
from numba import njit

from stream.ratings.base import Belief, concat_f64, offsets_of, split
from stream.ratings.registry import SPECS
from stream.ratings.spec import load

_LITTLE = sys.byteorder == "little"


class Codec(ABC):
    """A system's storage form; ``encode_many`` / ``decode_many`` here are the per-item loops."""

    name: str
    lossless: bool

    @abstractmethod
    def encode(self, belief: Belief) -> bytes: ...

    @abstractmethod
    def decode(self, data: bytes) -> Belief: ...

    def encode_many(self, beliefs: Sequence[Belief]) -> list[bytes]:
        """``[encode(b) for b in beliefs]``, byte for byte."""
        encode = self.encode
        return [encode(b) for b in beliefs]

    def decode_many(self, datas: Sequence[bytes]) -> list[Belief]:
        """``[decode(d) for d in datas]``, bit for bit (arrays may be views of one buffer)."""
        decode = self.decode
        return [decode(d) for d in datas]


CodecBase = Codec  # the name stream.ratings.cowan.codec subclasses


class Float64Codec(Codec):
    """Lossless: ``tag`` + the *packed* belief (``pack``: its values as little-endian float64, what
    ``fastpath.PackedRounds`` rates and the embedded store holds). Code that reads stored values
    without decoding them asks this class for the parts."""

    name = "f64"
    lossless = True
    #: the byte every stored value starts with (the encoding of a belief of no values)
    tag = b"\x01"

    @staticmethod
    def pack(belief: Belief) -> bytes:
        """The packed form of a belief: its values as little-endian float64, no tag."""
        return np.ascontiguousarray(belief, dtype="<f8").tobytes()

    @staticmethod
    def unpack(packed: bytes | memoryview) -> Belief:
        """``pack``'s inverse, bit for bit: a new, writable float64 array."""
        return np.frombuffer(packed, dtype="<f8").astype(np.float64)

    def encode(self, belief: Belief) -> bytes:
        return self.tag + self.pack(belief)

    def decode(self, data: bytes) -> Belief:
        if data[:1] != self.tag:
            raise ValueError(f"not an f64 belief (tag {data[:1]!r})")
        return np.frombuffer(data, dtype="<f8", offset=1).astype(np.float64)

    def encode_many(self, beliefs: Sequence[Belief]) -> list[bytes]:
        n = len(beliefs)
        if n < 2:
            return [self.encode(b) for b in beliefs]
        try:
            # little-endian hosts: "<f8" is float64 itself, so concat_f64 (one GIL-held copy) applies
            flat = concat_f64(beliefs) if _LITTLE else np.concatenate(beliefs, dtype="<f8", casting="same_kind")
        except (ValueError, TypeError):
            return super().encode_many(beliefs)  # 0-d or mixed shapes: let encode say why
        if flat.ndim != 1:
            return super().encode_many(beliefs)
        return self.encode_flat(flat, offsets_of(beliefs))

    def encode_flat(self, values: np.ndarray, offsets: np.ndarray) -> list[bytes]:
        """``encode_many`` of the beliefs ``values[offsets[i] : offsets[i + 1]]`` (a step's arena,
        ``stream.state.tagged_pool``), byte for byte: one copy each."""
        raw = np.ascontiguousarray(values, dtype="<f8").view(np.uint8).data
        tag = self.tag
        return [tag + raw[a:b] for a, b in pairwise((offsets * 8).tolist())]

    def decode_many(self, datas: Sequence[bytes]) -> list[Belief]:
        n = len(datas)
        if n < 2:
            return [self.decode(d) for d in datas]
        blob = b"".join(datas)
        if len(blob) > _F64_BATCH_MAX_BYTES * n:
            # long beliefs: one large fresh buffer (page faults) costs more than n small copies
            return super().decode_many(datas)
        out, ends, bad = _unpack_f64(np.frombuffer(blob, dtype=np.uint8), offsets_of(datas), self.tag[0])
        if bad >= 0:
            return super().decode_many(datas)  # let decode raise its own error
        return split(out.view("<f8").astype(np.float64, copy=False), ends // 8)


#: Float64Codec.decode_many batches only when the mean encoded belief is at most this long
_F64_BATCH_MAX_BYTES = 513


@njit(cache=True, nogil=True)
def _unpack_f64(buf: np.ndarray, offsets: np.ndarray, tag: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The payloads of ``buf[offsets[i]:offsets[i + 1]]`` (tag byte dropped) back to back,
    8-byte aligned: ``(bytes, byte offsets, -1)``, or ``(_, _, i)`` for the first item
    ``Float64Codec.decode`` would reject."""
    n = offsets.shape[0] - 1
    ends = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        s = offsets[i]
        e = offsets[i + 1]
        if e <= s or buf[s] != tag or (e - s - 1) % 8 != 0:
            return np.empty(0, dtype=np.uint8), ends, i
        ends[i + 1] = ends[i] + (e - s - 1)
    out = np.empty(ends[n], dtype=np.uint8)
    for i in range(n):
        out[ends[i] : ends[i + 1]] = buf[offsets[i] + 1 : offsets[i + 1]]
    return out, ends, -1


def codec_for(system_name: str) -> Codec:
    """The codec a system's beliefs are stored with: its spec's (imported on first use: Elo-MMR users
    never import Cowan's kernels); ``Float64Codec`` for a name the registry does not list."""
    spec = SPECS.get(system_name)
    if spec is None:
        return Float64Codec()
    codec: Codec = load(spec.codec)()
    return codec
