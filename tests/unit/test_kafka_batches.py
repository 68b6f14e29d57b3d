"""``stream.service.kafka_batches`` against aiokafka itself: the same partitions as its
``DefaultPartitioner`` (murmur2), and the same record batches, byte for byte and cut at the same
records, as its ``DefaultRecordBatchBuilder`` writes for the same records and timestamp."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import MessageBatch
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder, _DefaultRecordBatchBuilderPy
from aiokafka.structs import TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.service.kafka_batches import BuiltBatch, partitions, record_batches
from stream.text_columns import cat

_messages = st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=700)), min_size=1, max_size=120)


def _aiokafka_batches(records: list[tuple[bytes, bytes]], timestamp: int, max_bytes: int,
                      builder_type: type = DefaultRecordBatchBuilder) -> list[tuple[bytes, int]]:
    """What aiokafka's builder writes: records appended in order, a new batch where one is full."""
    out: list[tuple[bytes, int]] = []
    builder, offset = builder_type(2, 0, 0, -1, -1, 0, max_bytes), 0
    for key, value in records:
        if builder.append(offset, timestamp, key, value, []) is None:
            out.append((bytes(builder.build()), offset))
            builder, offset = builder_type(2, 0, 0, -1, -1, 0, max_bytes), 0
            assert builder.append(offset, timestamp, key, value, []) is not None
        offset += 1
    out.append((bytes(builder.build()), offset))
    return out


@settings(deadline=None)  # (the first example loads the numba kernels from their cache: ~0.6 s on a busy machine)
@given(messages=_messages, n_parts=st.integers(1, 9))
def test_each_key_goes_to_the_partition_aiokafkas_partitioner_picks(messages: list[tuple[bytes, bytes]],
                                                                    n_parts: int) -> None:
    keys = [k for k, _ in messages]
    assert partitions(cat(keys), n_parts).tolist() == [(murmur2(k) & 0x7FFFFFFF) % n_parts for k in keys]


@settings(max_examples=60, deadline=None)
@given(messages=_messages, n_parts=st.integers(1, 4), max_bytes=st.sampled_from([64, 200, 1000, 5000, 262144]),
       timestamp=st.integers(0, 2**41))
def test_a_partitions_batches_are_the_bytes_aiokafka_writes(messages: list[tuple[bytes, bytes]], n_parts: int,
                                                            max_bytes: int, timestamp: int) -> None:
    keys, values = cat([k for k, _ in messages]), cat([v for _, v in messages])
    place = partitions(keys, n_parts)
    for j in range(n_parts):
        rows = np.flatnonzero(place == j)
        got = record_batches(keys, values, rows, timestamp, max_bytes)
        if not rows.size:
            assert got == []
            continue
        assert got == _aiokafka_batches([messages[r] for r in rows.tolist()], timestamp, max_bytes)
        for raw, count in got:  # and aiokafka reads them back: CRC valid, the records in order
            batch = DefaultRecordBatch(bytearray(raw))
            assert batch.validate_crc()
            assert len(list(batch)) == count


def test_a_built_batch_is_sent_as_it_is_by_aiokafkas_message_batch() -> None:
    """The part of aiokafka's ``MessageBatch`` the sender uses (an upgrade guard for the private interface)."""
    keys, values = cat([b"k1", b"k2"]), cat([b"v1", b"v22"])
    raw, count = record_batches(keys, values, np.arange(2), 1, 1 << 16)[0]

    async def check() -> None:  # (a MessageBatch makes its futures on the running loop)
        batch = MessageBatch(TopicPartition("t", 0), BuiltBatch(raw, count), ttl=30, linger_time=0)
        assert batch.get_data_buffer() == raw and batch.record_count == 2 and not batch.is_empty()
        assert batch.remaining_linger() is None  # closed: ready to send

    asyncio.run(check())
    assert BuiltBatch(raw, count).append(timestamp=None, key=b"x", value=b"y") is None


def test_a_batch_that_would_be_max_bytes_exactly_is_cut_as_each_aiokafka_builder_cuts_it() -> None:
    """aiokafka's compiled builder refuses a record that would make the batch ``max_bytes`` long exactly,
    its pure-Python one takes it: each rule as that builder writes, and the default as the builder aiokafka
    uses (records whose fourth batch is 200 bytes exactly when filled)."""
    # (aiokafka defines its compiled builder only where its extension is built and not turned off)
    compiled_builder = pytest.importorskip("aiokafka.record._crecords").DefaultRecordBatchBuilder
    sizes = [(14, 17), (31, 306), (13, 392), (5, 4), (31, 10), (19, 4), (32, 6), (17, 97), (21, 285), (40, 7)]
    messages = [(bytes(k), bytes(v)) for k, v in sizes]
    keys, values = cat([k for k, _ in messages]), cat([v for _, v in messages])
    rows = np.arange(len(messages))
    compiled = _aiokafka_batches(messages, 2**41, 200, compiled_builder)
    plain = _aiokafka_batches(messages, 2**41, 200, _DefaultRecordBatchBuilderPy)
    assert [c for _, c in compiled] != [c for _, c in plain] and len(plain[3][0]) == 200
    assert record_batches(keys, values, rows, 2**41, 200, fills_to_max=False) == compiled
    assert record_batches(keys, values, rows, 2**41, 200, fills_to_max=True) == plain
    assert record_batches(keys, values, rows, 2**41, 200) == _aiokafka_batches(messages, 2**41, 200)
