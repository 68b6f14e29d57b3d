"""An event its pool's system cannot rate is dead-lettered with a reason naming the system, for every
system of the registry as its spec states what it rates (``multiplayer_rounds``, ``team_rounds``);
what it can rate is rated. Real Redis, the worker's processor."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from stream.ratings.registry import SPECS
from stream.service.config import PoolConfig, Settings
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

pytestmark = pytest.mark.integration


def _round(eid: str, pool: str, players: int) -> bytes:
    return orjson.dumps({"type": "round", "event_id": eid, "pool": pool, "round_id": eid, "time": 1,
                         "standings": [{"player": f"p{i}", "rank": i + 1} for i in range(players)]})


def _team_round(eid: str, pool: str) -> bytes:
    return orjson.dumps({"type": "round", "event_id": eid, "pool": pool, "round_id": eid, "time": 2,
                         "teams": [{"players": ["a", "b"], "rank": 1}, {"players": ["c", "d"], "rank": 2}]})


def _match(eid: str, pool: str) -> bytes:
    return orjson.dumps({"type": "match", "event_id": eid, "pool": pool, "time": 3, "a": "p0", "b": "p1",
                         "score": 1.0})


def test_each_system_dead_letters_what_its_spec_says_it_cannot_rate(redis_url: str) -> None:
    settings = Settings(pools={name: PoolConfig(name) for name in SPECS})
    msgs: list[Message] = []
    for name in SPECS:
        for value in (_round(f"{name}-multi", name, 3), _team_round(f"{name}-team", name),
                      _round(f"{name}-pair", name, 2), _match(f"{name}-match", name)):
            msgs.append(Message("in", 0, len(msgs), value))

    async def run() -> tuple[dict[str, str], set[str]]:
        store = RedisStore.from_url(redis_url, prefix=f"cap{uuid.uuid4().hex[:6]}")
        try:
            with ThreadPoolExecutor(1) as ex:
                proc = Processor(settings, store, ex)
                results = [await proc.process([m]) for m in msgs]  # a batch publishes a player's last rating only
        finally:
            await store.close()
        return ({d.event_id or "": d.reason for r in results for d in r.dead},
                {o.event_id for r in results for o in r.outputs})

    dead, rated = asyncio.run(run())
    for name, spec in SPECS.items():
        events = {f"{name}-{k}" for k in ("multi", "team", "pair", "match")}  # ("elo-" also begins "elo-mmr-")
        refused = {f"{name}-multi"} if not spec.multiplayer_rounds else set()
        refused |= {f"{name}-team"} if not spec.team_rounds else set()
        assert set(dead) & events == refused, (name, dead)
        for eid in refused:
            assert dead[eid].startswith(f"rating: {name} "), dead[eid]
        assert rated & events == events - refused, (name, rated)
    assert dead["cowan-multi"] == "rating: cowan rates only two-player rounds (got 3)"
    assert dead["glicko-team"] == "rating: glicko does not rate team rounds (a round with teams)"
