"""``mmr bench service --history FILE``: a whole real history through the bench's worker.

Why a phase of its own: the other phases send uniform synthetic load to pools of 10,000
players. A real history is what ``mmr replay --broker`` sends: the Codeforces file is 1,071
rounds of up to ~30,000 contestants, 280,701 players over ten years, so takes hold hundreds
of rounds and a Redis step can touch a large share of the pool. The phase publishes the file
exactly as ``mmr replay --broker`` would (pool ``hist``), and reports:

* the wall time from the first message produced to the last one committed and published,
  and results/s;
* the longest Redis command of the run with this run's keys (``SLOWLOG``, so only commands
  over Redis's ``slowlog-log-slower-than``, 10 ms by default): Redis runs nothing else
  meanwhile, which is what ``MMR_MAX_STEP_PLAYERS`` bounds;
* with the check on, whether the pool's final state equals ``mmr replay --embedded`` on the
  same file, bit for bit (players compared, players that differ).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import click
import redis

from stream.engine.embedded import EmbeddedPipeline
from stream.events.inputs import CsvMapping, read_records
from stream.files import iter_records
from stream.service.config import Settings
from stream.service.export import export_rows
from stream.state.redis_store import RedisStore
from stream.tools.publish import messages

POOL = "hist"
#: matches per ``match_columns`` message, as ``mmr replay --broker``'s default batch
BATCH = 4096


def history_messages(path: str, s: Settings) -> tuple[str, list[tuple[bytes, bytes]], int]:
    """(topic, [(key, value)], results): the file as ``mmr replay --broker`` publishes it into
    pool ``hist``. One kind of event per file (rounds, matches or round results), so that
    one topic's clock measures it."""
    results = 0

    def counted(records: Iterator[tuple[str, str, Any]]) -> Iterator[tuple[str, str, Any]]:
        nonlocal results
        for where, etype, value in records:  # a round's results are its standings
            results += (len(value.players) if etype == "round" else len(value) if isinstance(value, list)
                        else int(etype != "round_completed"))
            yield where, etype, value

    msgs = list(messages(counted(iter_records((path,), POOL, CsvMapping(), False)), s, BATCH))
    topics = {topic for topic, *_ in msgs}
    if len(topics) != 1:
        raise click.ClickException(f"--history {path}: expected events of one kind (one input topic), "
                                   f"got {len(topics)} topics")
    return topics.pop(), [(POOL.encode(), value) for _, _, value, _, _ in msgs], results


def slowest_command_ms(s: Settings, since: float) -> float | None:
    """The longest command in Redis's slow log since ``since`` (epoch s) naming this run's keys."""
    r = redis.Redis.from_url(s.redis_url, **s.redis_kwargs())
    try:
        entries: list[dict[str, Any]] = r.slowlog_get(1024)  # type: ignore[assignment]
    finally:
        r.close()
    mine = s.key_prefix.encode()
    durations = [int(e["duration"]) for e in entries
                 if int(e["start_time"]) >= int(since) and mine in _as_bytes(e.get("command", b""))]
    return max(durations) / 1000 if durations else None


def _as_bytes(x: object) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


def compare_with_embedded(path: str, s: Settings, system: str) -> tuple[int, int]:
    """(players, players whose final rating row differs from the embedded replay's)."""
    pipe = EmbeddedPipeline(system, {}, pool_systems={POOL: (system, {})})
    pipe.run(read_records(path, POOL))
    want = {r["player"]: r for r in pipe.final_ratings()}

    async def stored() -> list[dict[str, Any]]:
        store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, **s.redis_kwargs())
        try:
            return await export_rows(store, [POOL])
        finally:
            await store.close()

    got = {r["player"]: r for r in asyncio.run(stored())}
    return len(want), sum(1 for p in want.keys() | got.keys() if want.get(p) != got.get(p))
