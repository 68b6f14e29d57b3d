"""Kafka record batches (message format v2) written by columns: a step's rating messages without an
object or a Python call per message.

Why: a step of the Codeforces history publishes ~50,000 ratings. Through aiokafka's ``BatchBuilder``
each one was a ``bytes`` key and value cut from the step's columns, a partition found by a dict of
keys (murmur2 is pure Python in aiokafka), and an ``append`` (a Python frame and a C call), ~1.5 s of
the event loop in a run of the history (BENCHMARKS.md, "Service"). Here the keys' partitions are
hashed by one numba pass and each partition's records are written into batches by another, straight
from the columns' buffers (their CRCs by aiokafka's own function); aiokafka sends the batches as they
are (``BuiltBatch``).

The bytes are those aiokafka's own builder writes for the same records with the same timestamp
(``DefaultRecordBatchBuilder``: no compression, no producer id, no headers), cut into batches where
it would cut them (tests/unit/test_kafka_batches.py checks both, and murmur2 against aiokafka's);
a producer that compresses or is idempotent is not served here (``supported``).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import struct
from itertools import pairwise

import numba as nb
import numpy as np
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatchBuilder, _DefaultRecordBatchBuilderPy
from aiokafka.record.util import calc_crc32c

from stream.ratings.base import IntArray
from stream.runtime.copies import copy_into
from stream.text_columns import Column

#: bytes of a v2 record batch's header (``DefaultRecordBase.HEADER_STRUCT``)
HEADER_BYTES = 61
_CRC_AT = 17  # the CRC's place in the header; it covers the bytes from the attributes (21) on
_ATTRIBUTES_AT = 21
_COUNT_AT = 57  # the records' count
#: whether aiokafka's builder fills a batch up to ``max_bytes`` exactly: its pure-Python one does, its
#: compiled one (the default where its extension is built) refuses a record that would make the batch
#: exactly that long (aiokafka 0.14; pinned)
FILLS_TO_MAX = DefaultRecordBatchBuilder is _DefaultRecordBatchBuilderPy


@nb.njit(cache=True, nogil=True)
def _murmur2(blob, a, b):  # type: ignore[no-untyped-def]
    """Kafka's murmur2 of ``blob[a:b]`` (``aiokafka.partitioner.murmur2``), 0 .. 2**32 - 1: 32-bit
    arithmetic in 64-bit integers, cut back to 32 bits after each product."""
    mask = np.uint64(0xFFFFFFFF)
    m = np.uint64(0x5BD1E995)
    n = b - a
    h = np.uint64(0x9747B28C) ^ np.uint64(n)
    for i in range(n // 4):
        j = a + 4 * i
        k = (np.uint64(blob[j]) | (np.uint64(blob[j + 1]) << np.uint64(8)) | (np.uint64(blob[j + 2]) << np.uint64(16))
             | (np.uint64(blob[j + 3]) << np.uint64(24)))
        k = (k * m) & mask
        k ^= k >> np.uint64(24)
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = a + (n & ~3)
    extra = n % 4
    if extra >= 3:
        h ^= np.uint64(blob[tail + 2]) << np.uint64(16)
    if extra >= 2:
        h ^= np.uint64(blob[tail + 1]) << np.uint64(8)
    if extra >= 1:
        h ^= np.uint64(blob[tail])
        h = (h * m) & mask
    h ^= h >> np.uint64(13)
    h = (h * m) & mask
    h ^= h >> np.uint64(15)
    return np.int64(h)


@nb.njit(cache=True, nogil=True)
def _partition_of(blob, at, n_parts):  # type: ignore[no-untyped-def]
    out = np.empty(at.shape[0] - 1, dtype=np.int64)
    for i in range(out.shape[0]):
        out[i] = (_murmur2(blob, at[i], at[i + 1]) & 0x7FFFFFFF) % n_parts
    return out


def partitions(keys: Column, n_parts: int) -> IntArray:
    """Each key's place among a topic's ``n_parts`` partitions sorted by id, as aiokafka's
    ``DefaultPartitioner`` picks it: ``(murmur2(key) & 0x7FFFFFFF) % n_parts``."""
    blob, at = keys
    return _partition_of(blob, at, n_parts)


@nb.njit(cache=True, nogil=True)
def _varint_size(v):  # type: ignore[no-untyped-def]
    """Bytes of ``v`` (≥ 0) as a zigzag varint (``2 * v``, 7 bits a byte)."""
    z = 2 * v
    size = 1
    while z > 0x7F:
        z >>= 7
        size += 1
    return size


@nb.njit(cache=True, nogil=True)
def _put_varint(out, pos, v):  # type: ignore[no-untyped-def]
    z = 2 * v
    while z > 0x7F:
        out[pos] = (z & 0x7F) | 0x80
        z >>= 7
        pos += 1
    out[pos] = z
    return pos + 1


@nb.njit(cache=True, nogil=True)
def _put_be(out, pos, v, size):  # type: ignore[no-untyped-def]
    for i in range(size):
        out[pos + i] = (v >> (8 * (size - 1 - i))) & 0xFF


@nb.njit(cache=True, nogil=True)
def _batches(kblob, kat, vblob, vat, rows, timestamp, limit):  # type: ignore[no-untyped-def]
    """The records ``rows`` (key ``kblob[kat[r]:kat[r + 1]]``, value likewise) in order, cut into v2
    batches of at most ``limit`` bytes as ``DefaultRecordBatchBuilder.append`` cuts them: one buffer, and
    where each batch starts and ends (``ends``). Their CRCs are left 0 (``record_batches`` writes them)."""
    n = rows.shape[0]
    body = np.empty(n, dtype=np.int64)  # a record's bytes after its length
    starts = np.zeros(n + 1, dtype=np.int64)  # each batch's first row (cut below)
    nb_ = 0
    size = HEADER_BYTES
    delta = 0  # the record's offset in its batch
    total = 0
    for i in range(n):
        r = rows[i]
        klen = kat[r + 1] - kat[r]
        vlen = vat[r + 1] - vat[r]
        # attributes, timestamp delta, offset delta, key, value, no headers
        b = 1 + 1 + _varint_size(delta) + _varint_size(klen) + klen + _varint_size(vlen) + vlen + 1
        if delta > 0 and size + b + _varint_size(b) > limit:  # (as aiokafka: a batch's first always fits)
            nb_ += 1
            starts[nb_] = i
            total += size
            size = HEADER_BYTES
            delta = 0
            b = 1 + 1 + 1 + _varint_size(klen) + klen + _varint_size(vlen) + vlen + 1
        body[i] = b
        size += b + _varint_size(b)
        delta += 1
    nb_ += 1
    starts[nb_] = n
    total += size
    out = np.empty(total, dtype=np.uint8)
    ends = np.empty(nb_ + 1, dtype=np.int64)
    ends[0] = 0
    pos = 0
    for j in range(nb_):
        first = pos
        pos += HEADER_BYTES
        for i in range(starts[j], starts[j + 1]):
            r = rows[i]
            pos = _put_varint(out, pos, body[i])
            out[pos] = 0  # attributes
            out[pos + 1] = 0  # timestamp delta (every record of a call has the same timestamp)
            pos = _put_varint(out, pos + 2, i - starts[j])
            a, z = kat[r], kat[r + 1]
            pos = _put_varint(out, pos, z - a)
            copy_into(out, pos, kblob, a, z - a)
            pos += z - a
            a, z = vat[r], vat[r + 1]
            pos = _put_varint(out, pos, z - a)
            copy_into(out, pos, vblob, a, z - a)
            pos += z - a
            out[pos] = 0  # no headers
            pos += 1
        count = starts[j + 1] - starts[j]
        _put_be(out, first, 0, 8)  # base offset: the broker's
        _put_be(out, first + 8, pos - first - 12, 4)  # length, after itself
        _put_be(out, first + 12, -1, 4)  # partition leader epoch: none (-1)
        out[first + 16] = 2  # magic
        _put_be(out, first + 21, 0, 2)  # attributes: no compression, not transactional
        _put_be(out, first + 23, count - 1, 4)  # last offset delta
        _put_be(out, first + 27, timestamp, 8)  # first timestamp
        _put_be(out, first + 35, timestamp, 8)  # max timestamp
        _put_be(out, first + 43, -1, 8)  # producer id: none (-1)
        _put_be(out, first + 51, -1, 2)  # producer epoch: none (-1)
        _put_be(out, first + 53, 0, 4)  # base sequence (as aiokafka's ``BatchBuilder`` writes it)
        _put_be(out, first + 57, count, 4)  # records
        _put_be(out, first + 17, 0, 4)  # CRC: written after
        ends[j + 1] = pos
    return out, ends


def record_batches(keys: Column, values: Column, rows: IntArray, timestamp_ms: int,
                   max_bytes: int, fills_to_max: bool = FILLS_TO_MAX) -> list[tuple[bytes, int]]:
    """The records of ``rows`` (in order; row r: key r of ``keys``, value r of ``values``) as v2 record
    batches of at most ``max_bytes`` (a batch holds one record at least), each with its count.
    ``fills_to_max``: a batch may be ``max_bytes`` long exactly (else one byte less), as the builder
    aiokafka uses does (``FILLS_TO_MAX``).

    Each batch's CRC-32C is aiokafka's C function (~0.5 ns a byte, about a third of a byte-table
    loop's cost): a step's batches are ~20 MB, so the CRC is most of the bytes' work."""
    if not rows.shape[0]:
        return []
    out, ends = _batches(keys[0], keys[1], values[0], values[1], np.ascontiguousarray(rows, dtype=np.int64),
                         np.int64(timestamp_ms), np.int64(max_bytes if fills_to_max else max_bytes - 1))
    view = memoryview(out)
    bounds = ends.tolist()
    for a, b in pairwise(bounds):
        struct.pack_into(">I", out, a + _CRC_AT, calc_crc32c(view[a + _ATTRIBUTES_AT:b]))
    return [(out[a:b].tobytes(), int.from_bytes(view[a + _COUNT_AT:a + HEADER_BYTES], "big"))
            for a, b in pairwise(bounds)]  # (each batch copied once, out of the buffer)


class BuiltBatch(BatchBuilder):
    """A record batch already written (``record_batches``), as aiokafka's ``send_batch`` takes a
    ``BatchBuilder``: closed, nothing more appended, its bytes sent as they are."""

    def __init__(self, raw: bytes, count: int) -> None:  # (the builder's own state is not made)
        self._buffer = raw
        self._count = count
        self._closed = True

    def append(self, *, timestamp: object, key: object, value: object, headers: object = ()) -> object:
        """None: the batch is full (closed), as ``BatchBuilder.append`` answers then."""
        return None

    def _set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        raise NotImplementedError("a batch written by columns carries no producer state (idempotent producer)")

    def _build(self) -> bytes:  # type: ignore[override]
        return self._buffer

    def size(self) -> int:
        return len(self._buffer)

    def record_count(self) -> int:
        return self._count


def supported(producer: object) -> bool:
    """Whether ``producer`` (aiokafka's) sends batches written here unchanged: no compression, and
    neither idempotent nor transactional (those set producer state in each batch)."""
    return (getattr(producer, "_compression_type", None) in (None, 0)
            and getattr(producer, "_txn_manager", None) is None)


def warmup() -> None:
    """Compile (or load from numba's cache) the kernels, on two records."""
    keys = (np.frombuffer(b"ab", dtype=np.uint8), np.array([0, 1, 2], dtype=np.int64))
    partitions(keys, 3)
    record_batches(keys, keys, np.arange(2, dtype=np.int64), 0, 1 << 16)
