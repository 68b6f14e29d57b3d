"""``mmr rebuild``: the state in Redis rated again from the input topics, from their earliest retained offset.

For a Redis that lost acknowledged writes (stream.state.marks; docs/operator.md, "Redis lost
acknowledged writes"): every record of the three input topics, up to each partition's end when the
rebuild starts, goes through the worker's own rating path (``Processor``), in the order a worker takes
them, so the state is what a worker rating the same records would leave. Nothing is published (those
ratings and dead letters were published when first rated). At the end every pool rated is listed again
(the set of pools may be on another Redis Cluster master than the pool), the state marks are raised to
each partition's last offset read and the pools' marks removed (the commit counters the rebuild leaves
are not those it replaced), so a waiting worker rates again by itself. ``--wipe`` deletes every
key of the prefix first (a state that is not a prefix of the history); without it the dedup makes the
rebuild safe over a state that holds a prefix. Workers must be stopped or waiting meanwhile.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from stream.runtime import thread_names
from stream.service.config import Settings, from_env
from stream.service.messages import Message
from stream.service.metrics import Metrics
from stream.service.processor import Processor
from stream.state.keys import KeySpace, glob_escape
from stream.state.marks import clear_pool_marks, write_marks
from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)


@dataclass
class Rebuilt:
    """What a rebuild did."""

    messages: int = 0
    dead_letters: int = 0
    ratings: int = 0
    deleted_keys: int = 0
    #: "topic/partition" -> (first offset read, last offset read)
    read: dict[str, tuple[int, int]] = field(default_factory=dict)
    halted: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


async def wipe(store: RedisStore) -> int:
    """Delete every key under the store's prefix (every node of a cluster); how many."""
    n = 0
    pattern = glob_escape(KeySpace(store.prefix).prefix + ":") + "*"
    batch: list[bytes] = []
    async with store._io():
        async for key in store.r.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                n += await _unlink(store, batch)
                batch = []
        if batch:
            n += await _unlink(store, batch)
    return n


async def _unlink(store: RedisStore, keys: list[bytes]) -> int:
    pipe = store.r.pipeline(transaction=False)
    for k in keys:  # one by one: the keys of a cluster are in many slots
        pipe.unlink(k)
    return sum(int(x) for x in await pipe.execute())


async def _partitions(consumer: AIOKafkaConsumer, topics: Sequence[str]) -> list[TopicPartition]:
    await consumer.topics()  # fetches the metadata of every topic
    tps = []
    for t in topics:
        parts = consumer.partitions_for_topic(t)
        if not parts:
            raise click.ClickException(f"input topic {t!r} does not exist (KAFKA_BOOTSTRAP_SERVERS, MMR_TOPIC_*)")
        tps += [TopicPartition(t, p) for p in sorted(parts)]
    return tps


def _in_order(records: dict[TopicPartition, list[ConsumerRecord[Any, Any]]]) -> list[Message]:
    """One fetch's records as messages: each partition's in offset order, the partitions merged by record time."""
    streams = [[Message(r.topic, r.partition, r.offset, r.value or b"", None, r.timestamp) for r in rs]
               for _, rs in sorted(records.items(), key=lambda kv: (kv[0].topic, kv[0].partition))]
    return list(heapq.merge(*streams, key=lambda m: m.timestamp or 0))


async def run_rebuild(s: Settings, wipe_first: bool = False, progress: Any = None) -> Rebuilt:
    """See the module docstring."""
    started = time.perf_counter()
    out = Rebuilt()
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, seen_max_ids=s.seen_max_ids, cluster=s.redis_cluster,
                                client_name=s.redis_client_name("rebuild"), **s.replication_kwargs(),
                                **s.redis_kwargs())
    executor = thread_names.named_executor(thread_names.NUMBA)
    metrics = Metrics()
    processor = Processor(s, store, executor, metrics)
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", **s.aiokafka_kwargs())
    await consumer.start()
    try:
        if wipe_first:
            out.deleted_keys = await wipe(store)
        tps = await _partitions(consumer, s.input_topics())
        first = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if end[tp] > first[tp]}
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, first[tp])
        fixed: set[TopicPartition] = set()  # partitions whose end is the highwater of a fetch
        while todo:
            fetched = await consumer.getmany(*todo, timeout_ms=1000, max_records=s.take_max)
            for tp in todo - fixed:
                # ListOffsets is not trusted alone: a broker may answer less than the log's end (Tansu answers
                # the last record batch's first offset + 1); the first fetch's highwater is the end then
                hw = consumer.highwater(tp)
                if hw is not None:
                    end[tp] = max(end[tp], hw)
                    fixed.add(tp)
            batch: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
            for tp, records in fetched.items():
                records = [r for r in records if r.offset < end[tp]]  # records produced since the start: a worker's
                if records:
                    batch[tp] = records
                    key = f"{tp.topic}/{tp.partition}"
                    lo = out.read[key][0] if key in out.read else records[0].offset
                    out.read[key] = (lo, records[-1].offset)
                    if records[-1].offset + 1 >= end[tp]:
                        todo.discard(tp)
            for tp in [tp for tp in todo if tp not in fetched and tp in fixed]:  # the rest are gaps (compaction)
                if await consumer.position(tp) >= end[tp]:
                    todo.discard(tp)
            msgs = _in_order(batch)
            if not msgs:
                continue
            # as the worker rates a batch: input errors become dead letters, Redis outages are waited out
            res = await processor.start(msgs, safe=True)
            out.messages += len(msgs)
            out.dead_letters += len(res.dead)
            out.ratings += len(res.outputs)
            if progress is not None:
                progress(out)
        pools = sorted(processor.engines)
        if pools:  # listed again: on a Redis Cluster the set of pools may be on a master that lost it
            async with store._io():
                await store.r.sadd(store.keys.pools_key(), *pools)
        await write_marks(store, {key: last for key, (_, last) in out.read.items()})
        await clear_pool_marks(store)
        out.halted = processor.halts.listing()
    finally:
        await consumer.stop()
        executor.shutdown(wait=True)
        await store.close()
    out.seconds = time.perf_counter() - started
    return out


@click.command()
@click.option("--wipe", is_flag=True, help="Delete every key of MMR_KEY_PREFIX first (see docs/operator.md).")
@click.option("--no-progress", is_flag=True, help="No progress line on stderr.")
def rebuild(wipe: bool, no_progress: bool) -> None:
    """Rate the input topics again into Redis from their earliest retained offset (after Redis lost writes)."""
    s = from_env()

    def progress(r: Rebuilt) -> None:
        click.echo(f"\r{r.messages} messages rated", nl=False, err=True)

    done = asyncio.run(run_rebuild(s, wipe, None if no_progress else progress))
    if not no_progress:
        click.echo("", err=True)
    parts = ", ".join(f"{tp} {lo}-{hi}" for tp, (lo, hi) in sorted(done.read.items())) or "none"
    click.echo(f"rebuilt {s.key_prefix!r} from {done.messages} messages in {done.seconds:.1f} s (offsets read: "
               f"{parts}); {done.dead_letters} dead letters (not published again), {done.deleted_keys} keys "
               "deleted first", err=True)
    if done.halted:
        raise click.ClickException(f"partitions halted by a bug in the rating step, not rebuilt past it: "
                                   f"{done.halted} (docs/operator.md, 'A bug in the rating step')")
