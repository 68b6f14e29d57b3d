"""``mmr replay INPUT --broker URL``: publish a history to the service's input topics.

Rounds go out as ``round`` events, 1-v-1 results as ``match_columns`` messages of up to
``batch_size`` consecutive matches of one pool (Faust's cost is per *message*, so many matches a
message is where throughput comes from), ``round_result``/``round_completed`` unchanged; each keyed by
its pool (``stream.client.Publisher``). Event ids are kept (contest and CSV inputs get deterministic
ones from the reader), so publishing a file twice, or an overlap after ``--skip K``, changes nothing.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from stream.client import Publisher, match_batch_json, match_columns_json, round_json
from stream.events.inputs import CsvMapping, OnInvalid
from stream.events.model import MatchEvent
from stream.events.validate import MATCH_LISTS
from stream.service.config import Settings, from_env

__all__ = ["match_batch_json", "match_columns_json", "messages", "publish_async", "publish_history", "round_json"]


def messages(records: Iterable[tuple[str, str, Any]], s: Settings,
             batch_size: int) -> Iterator[tuple[str, str, bytes, int, int]]:
    """(topic, pool, value, n_events, event time ms) in publishing order. Matches are held per pool until
    ``batch_size`` or a round of that pool (so they keep their order as far as two topics allow)."""
    pending: dict[str, list[MatchEvent]] = {}

    def flush(pool: str) -> Iterator[tuple[str, str, bytes, int, int]]:
        ms = pending.pop(pool, None)
        if ms:
            yield s.topic_matches, pool, match_columns_json(pool, ms), len(ms), ms[-1].time

    for _where, etype, value in records:
        if etype == "match" or etype in MATCH_LISTS:
            for m in [value] if etype == "match" else value:
                batch = pending.setdefault(m.pool, [])
                batch.append(m)
                if len(batch) >= batch_size:
                    yield from flush(m.pool)
        elif etype == "round":
            yield from flush(value.pool)
            yield s.topic_rounds, value.pool, round_json(value), 1, value.time
        else:
            yield s.topic_results, value["pool"], orjson.dumps(value), 1, int(value["time"])
    for pool in list(pending):
        yield from flush(pool)


async def publish_async(records: Iterable[tuple[str, str, Any]], s: Settings, batch_size: int = 4096,
                        rate: float = 0.0, speedup: float = 0.0) -> dict[tuple[str, int], int]:
    """Publish through a ``Publisher`` (topics created, messages keyed by pool); returns the
    last offset written per (topic, partition). The frames come from decoded records, which
    the reader validated, so they are sent as they are."""
    t0 = time.perf_counter()
    sent = 0
    first_time: int | None = None
    async with Publisher(settings=s) as pub:
        for topic, pool, value, n, etime in messages(records, s, batch_size if not rate else min(batch_size, 64)):
            if rate > 0:
                wait = sent / rate - (time.perf_counter() - t0)
                if wait > 0:
                    await asyncio.sleep(wait)
            elif speedup > 0:
                first_time = etime if first_time is None else first_time
                wait = (etime - first_time) / 1000.0 / speedup - (time.perf_counter() - t0)
                if wait > 0:
                    await asyncio.sleep(wait)
            await pub.send_frame(topic, pool, value)
            sent += n
    return pub.offsets


def publish_history(inputs: tuple[str, ...], broker: str | None, *, pool: str | None = None,
                    mapping: CsvMapping | None = None, skip: int = 0, rate: float = 0.0, speedup: float = 0.0,
                    batch_size: int = 4096, progress: bool = True,
                    settings: Settings | None = None, on_invalid: OnInvalid | None = None,
                    ) -> dict[tuple[str, int], int]:
    """Entry point of ``mmr replay --broker`` (topic names and security from the environment;
    ``broker`` None: the settings' bootstrap servers, i.e. KAFKA_BOOTSTRAP_SERVERS). ``on_invalid``:
    invalid records are handed to it and not published (``read_records``)."""
    from dataclasses import replace

    from stream.files import iter_records

    s = settings or from_env()
    if broker is not None:
        s = replace(s, kafka_bootstrap=broker)
    records = iter_records(inputs, pool, mapping or CsvMapping(), progress, skip, on_invalid=on_invalid)
    last = asyncio.run(publish_async(records, s, batch_size, rate, speedup))
    if progress:
        print(f"published to {s.kafka_bootstrap}: " + ", ".join(f"{t}/{p}@{o}" for (t, p), o in sorted(last.items())),
              file=sys.stderr)
    return last
