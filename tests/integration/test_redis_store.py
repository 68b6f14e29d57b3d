"""The Redis atomic step and the processor on a real Redis (no broker needed)."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from history_sink import history_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.engine.pool import PoolConfigError
from stream.service.config import PoolConfig, Settings
from stream.service.export import export_rows
from stream.service.processor import Message, Processor
from stream.state.cache import BeliefCache
from stream.state.id_index import PoolIds
from stream.state.redis_store import AlreadyApplied, Commit, Conflict, MetaConflict, RedisStore

pytestmark = pytest.mark.integration


def _store(url: str) -> RedisStore:
    return RedisStore.from_url(url, prefix=f"t{uuid.uuid4().hex[:8]}")


def _index(store: RedisStore, pool: str) -> PoolIds:
    idx = store.ids_index(pool)
    assert idx is not None
    return idx


def test_commit_is_compare_and_set(redis_url: str) -> None:
    async def run() -> None:
        store = _store(redis_url)
        snap = await store.snapshot("p", ["a"], ["e1"])
        assert snap.gen == "0" and snap.beliefs == {"a": None} and not snap.seen
        c = Commit(beliefs={"a": b"\x01x"}, scores={"a": 1.5}, event_ids=["e1"], offsets={"t/0": (None, 7)})
        assert await store.commit("p", snap.gen, c, {"system": "elo", "params": {}}) == 1
        with pytest.raises(Conflict):  # a second writer with the old token writes nothing
            await store.commit("p", snap.gen, Commit(beliefs={"a": b"\x01y"}, scores={"a": 2.0}, event_ids=["e2"]))
        snap2 = await store.snapshot("p", ["a"], ["e1", "e2"])
        assert snap2.gen == "1" and snap2.beliefs == {"a": b"\x01x"} and snap2.seen == {"e1"}
        assert (await store.page("p", 0, 5))[0] == [("a", 1.5)]
        assert await store.meta("p") == {"system": "elo", "params": {}}
        assert await store.pools() == ["p"]
        # a writer that believes the pool is new but with another system is refused
        with pytest.raises(MetaConflict):
            await store.commit("p", "1", Commit(beliefs={"b": b"\x01z"}, scores={"b": 0.0}, event_ids=["e3"]),
                               {"system": "cowan", "params": {}})
        assert await store.commit("p", "1", Commit(event_ids=["e3"]), {"system": "elo", "params": {}}) == 2
        await store.close()

    asyncio.run(run())


def test_beliefs_read_by_script_are_what_each_key_holds(redis_url: str) -> None:
    """``beliefs`` (names as one blob, read in chunks of 4,000 by a script) answers each player's value,
    None for a player without one, in the order asked, whatever the name holds (escaped characters,
    braces, non-ASCII)."""
    async def run() -> None:
        store = _store(redis_url)
        try:
            odd = ["a:b", "{x}", "%7D", "é名", "with space", ""]
            players = [*odd, *(f"p{i}" for i in range(9_001))]
            stored = {p: f"v{k}".encode() for k, p in enumerate(players) if k % 3 == 0}
            await store.commit("p", "0", Commit(beliefs=stored, scores=dict.fromkeys(stored, 0.0)),
                               {"system": "elo", "params": {}})
            asked = players[::-1]
            got = await store.beliefs("p", asked)
            assert list(got) == asked
            assert got == {p: await store.r.get(store.player_key("p", p)) for p in asked}
            assert got == {p: stored.get(p) for p in asked}
        finally:
            await store.close()

    asyncio.run(run())


def test_seen_ids_are_kept_in_two_generations_when_bounded(redis_url: str) -> None:
    """With ``seen_max_ids`` N, after any sequence of commits (random batch sizes): every id among
    the last N recorded is recognised, by the snapshot and by an optimistic commit, and the pool
    holds at most 2N + one batch of ids; an id older than both generations is forgotten."""
    import random

    n = 7
    rng = random.Random(1)

    async def run() -> None:
        store = _store(redis_url)
        store.seen_max_ids = n
        old_k = store.key("p", "ids:old")
        gen, recorded = "0", list[str]()
        for k in range(60):
            ids = [f"e{len(recorded) + i}" for i in range(rng.randrange(0, 5))]
            gen = str(await store.commit("p", gen, Commit(event_ids=ids), check_ids=True))
            recorded += ids
            held = (await store.pool_counts("p"))["event_ids_recorded"]
            assert held <= 2 * n + 4
            snap = await store.snapshot("p", [], recorded)
            assert snap.gen == gen and snap.seen >= set(recorded[-n:]), k
            assert len(snap.seen) == held
        assert await store.r.exists(old_k)  # it did rotate
        forgotten = [e for e in recorded if e not in snap.seen]
        assert forgotten == recorded[:len(forgotten)] and forgotten  # the oldest ones, in order
        for e in (recorded[-1], recorded[-n]):
            with pytest.raises(AlreadyApplied):
                await store.commit("p", gen, Commit(event_ids=["fresh", e]), check_ids=True)
        assert int(await store.commit("p", gen, Commit(event_ids=[forgotten[-1]]), check_ids=True)) == int(gen) + 1
        await store.close()

    asyncio.run(run())


def test_done_rounds_are_kept_in_two_generations_when_bounded(redis_url: str) -> None:
    """With ``seen_max_ids`` N, ``:done`` is bounded as ``:ids`` is, whichever writes it (a commit that
    rates rounds, an expiry of many, of one): the pool holds at most 2N + one batch of round ids, the
    last N closed are recognised as done, and the ones forgotten are the oldest."""
    import random

    n = 5
    rng = random.Random(3)

    async def run() -> None:
        store = _store(redis_url)
        store.seen_max_ids = n
        gen, closed = "0", list[str]()
        got: set[str] = set()
        for k in range(45):
            rids = [f"R{len(closed) + i}" for i in range(rng.randrange(1, 3))]
            if k % 3 == 0:
                gen = str(await store.commit("p", gen, Commit(done_rounds=rids)))
            elif k % 3 == 1:
                await store.expire_rounds([("p", r) for r in rids])
            else:
                for r in rids:
                    await store.expire_round("p", r)
            closed += rids
            held = await store.r.scard(store.key("p", "done")) + await store.r.scard(store.key("p", "done:old"))
            assert held <= 2 * n + 2, k
            got, _ = await store.round_state("p", closed)
            assert set(closed[-n:]) <= got, k
        assert await store.r.exists(store.key("p", "done:old"))  # it did rotate
        forgotten = [r for r in closed if r not in got]
        assert forgotten and forgotten == closed[:len(forgotten)]
        await store.close()

    asyncio.run(run())


def test_two_writers_never_act_on_a_stale_index_of_applied_ids(redis_url: str) -> None:
    """Each store answers "applied before?" from its own index of the pool's ``:ids`` log. When
    another writer recorded ids meanwhile (even at the same ``gen``, as a store that missed them
    would believe), the commit is refused as AlreadyApplied, and the next read brings the index
    up to date: only the new bytes while the log's epoch is the same, both generations in full
    after the other writer rotated it or the log vanished."""

    async def run() -> None:
        a = _store(redis_url)
        a.seen_max_ids = 4
        b = RedisStore(a.r, a.prefix, seen_max_ids=4)
        gen = str(await a.commit("p", "0", Commit(event_ids=["e1", "e2"]), check_ids=True))
        assert (await b.snapshot("p", [], ["e1", "e3"])).seen == {"e1"}
        assert _index(b, "p").length == 32
        gen = str(await a.commit("p", gen, Commit(event_ids=["e3"]), check_ids=True))
        with pytest.raises(AlreadyApplied):  # b's index lacks e3: what b would conclude is stale
            await b.commit("p", gen, Commit(event_ids=["e4"]), check_ids=True)
        snap = await b.snapshot("p", [], ["e3", "e4"])
        assert snap.seen == {"e3"} and _index(b, "p").length == 48  # the tail only
        with pytest.raises(AlreadyApplied):  # now answered from b's own index
            await b.commit("p", snap.gen, Commit(event_ids=["e4", "e3"]), check_ids=True)
        gen = str(await b.commit("p", snap.gen, Commit(event_ids=["e4"]), check_ids=True))  # 4 ids: b rotates
        assert _index(b, "p").epoch == 1 and _index(b, "p").length == 0
        with pytest.raises(AlreadyApplied):  # a's index is of epoch 0
            await a.commit("p", gen, Commit(event_ids=["e5"]), check_ids=True)
        snap = await a.snapshot("p", [], ["e1", "e4", "e5"])
        assert snap.seen == {"e1", "e4"} and _index(a, "p").epoch == 1
        await a.r.delete(a.key("p", "ids"), a.key("p", "ids:old"), a.key("p", "ids:epoch"))
        assert (await a.snapshot("p", [], ["e1"])).seen == set()  # the log is gone: so is the index
        assert (await a.pool_counts("p"))["event_ids_recorded"] == 0
        await a.close()

    asyncio.run(run())


def test_processor_redelivery_is_a_noop(redis_url: str) -> None:
    matches = [{"event_id": f"m{i}", "time": i, "a": f"p{i % 7}", "b": f"p{(i + 3) % 7}", "score": (i % 3) / 2}
               for i in range(200)]
    msgs = [Message("in", 0, k, orjson.dumps({"type": "match_batch", "pool": "x", "matches": matches[k::4]}))
            for k in range(4)]
    msgs.append(Message("in", 0, 4, b"garbage"))

    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo"), store, ex)
            first = await proc.process(msgs)
            before = {p: v for chunk in [x async for x in store.scan_players("x")] for p, v in chunk}
            again = await proc.process(msgs[1:])  # re-delivered from offset 1
        after = {p: v for chunk in [x async for x in store.scan_players("x")] for p, v in chunk}
        assert before == after and len(after) == 7
        assert len(first.dead) == len(again.dead) == 1 and first.dead[0].offset == 4
        assert await store.r.hgetall(store.key("x", "wm")) == {b"in/0": b"3"}  # the garbage at 4 is no match of x
        assert (await store.pool_counts("x"))["event_ids_recorded"] == 200
        latest = {o.player: o for o in first.outputs}
        for o in again.outputs:  # re-published with the versions already reached, explained as the first time
            assert (o.version, o.rating) == (latest[o.player].version, latest[o.player].rating)
            assert o.explain is not None and o.explain == latest[o.player].explain
        await store.close()

    asyncio.run(run())


def test_rounds_that_change_nothing_store_their_newcomers_but_publish_nothing(redis_url: str) -> None:
    """A round of one player, or of players all tied, changes no belief. Its newcomers are stored
    at the prior (rounds 0, on the leaderboard), so the pool's state lists every player who took
    part, as ``replay --out`` does; no rating is published for them (the rating schema's version
    starts at 1), neither at once nor when the round is re-delivered; the same bytes as the
    embedded pipeline."""
    from stream.engine.embedded import EmbeddedPipeline
    from stream.events.model import RoundEvent
    from stream.ratings import make_system
    from stream.ratings.codec import codec_for

    def rnd(eid: str, t: int, ranks: dict[str, int]) -> Message:
        standings = [{"player": p, "rank": r} for p, r in ranks.items()]
        return Message("in", 0, t, orjson.dumps({"type": "round", "event_id": eid, "pool": "x", "round_id": eid,
                                                 "time": t, "standings": standings}))

    msgs = [rnd("r0", 0, {"solo": 1}), rnd("r1", 1, {"t1": 1, "t2": 1}), rnd("r2", 2, {"solo": 1, "t1": 2, "y": 3})]
    system = make_system("elo-mmr")
    prior = system.summary(system.new_belief())

    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(), store, ex)
            first = await proc.process(msgs[:2])
            assert first.outputs == [] and first.dead == []
            assert sorted((await store.page("x", 0, 10))[0]) == [(p, prior.rating) for p in ("solo", "t1", "t2")]
            assert (await proc.process(msgs[:2])).outputs == []  # re-delivered: still nothing to publish
            second = await proc.process(msgs[2:])
            assert sorted((o.player, o.version) for o in second.outputs) == [("solo", 1), ("t1", 1), ("y", 1)]
            again = await proc.process(msgs)  # re-delivered after the rating: republished at version 1 only
        assert {o.version for o in again.outputs} == {1}
        assert {o.player for o in again.outputs} == {"solo", "t1", "y"}
        pipe = EmbeddedPipeline("elo-mmr")
        for m in msgs:
            d = orjson.loads(m.value)
            players = [x["player"] for x in d["standings"]]
            ranks = np.array([x["rank"] for x in d["standings"]], dtype=np.int64)
            pipe.add("round", RoundEvent(event_id=d["event_id"], pool="x", round_id=d["round_id"], time=d["time"],
                                         players=players, ranks=ranks))
        pipe.flush()
        codec = codec_for("elo-mmr")
        want = {p: codec.encode(b) for _, p, b in pipe.beliefs()}
        assert await _state(store) == want and len(want) == 4
        await store.close()

    asyncio.run(run())


def test_the_processor_explains_each_change_as_the_embedded_history_does(redis_url: str, tmp_path: Path) -> None:
    """The worker's rating messages carry the rating before, the change, the cause and (Elo-MMR)
    the performance, equal field for field to `mmr replay --history`'s lines for the same units
    (rounds; one match message = one batch of ``--batch-size`` matches), and the commit stores
    each player's latest explanation (``:chg``) with its version."""
    from stream.engine.embedded import EmbeddedPipeline
    from stream.events.inputs import read_records

    rng = np.random.default_rng(5)
    events: list[dict[str, Any]] = []
    for k in range(12):
        who = rng.choice(40, 10, replace=False).tolist()
        events.append({"type": "round", "event_id": f"e{k}", "pool": "r", "round_id": f"round-{k}",
                       "time": 1000 * k, "standings": [{"player": f"p{i}", "rank": int(r)}
                                                       for i, r in zip(who, rng.integers(1, 5, 10), strict=True)]})
    size = 25
    matches = [{"event_id": f"m{k}", "time": k, "a": f"q{a}", "b": f"q{(a + 1 + k % 11) % 15}",
                "score": float(k % 3) / 2} for k, a in enumerate(rng.integers(15, size=8 * size).tolist())]
    batches = [{"type": "match_batch", "pool": "x", "matches": matches[i:i + size]}
               for i in range(0, len(matches), size)]

    async def run() -> list[Any]:
        store = _store(redis_url)
        outputs = []
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(pools={"r": PoolConfig("elo-mmr"), "x": PoolConfig("cowan")}), store, ex)
            for i, e in enumerate([*events, *batches]):  # one message a step: the units of the embedded replay
                res = await proc.process([Message("in", 0, i, orjson.dumps(e))])
                assert res.dead == []
                outputs += res.outputs
            records = {}
            for pool in ("r", "x"):
                players = sorted({o.player for o in outputs if o.pool == pool})
                records.update({(pool, p): orjson.loads(v) for p, v in (await store.changes(pool, players)).items()
                                if v is not None})
        await store.close()
        return [outputs, records]

    outputs, records = asyncio.run(run())
    history: list[dict[str, Any]] = []
    pipe = EmbeddedPipeline("elo-mmr", batch_size=size, pool_systems={"x": ("cowan", {})},
                            history=history_lines(history))
    src = tmp_path / "events.jsonl"
    src.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in [*events, *batches]))
    pipe.run(read_records(src))
    got = [o.as_dict() for o in outputs]
    assert got == history and len(got) > 100
    assert all("performance" in h and "round_id" in h for h in history if h["pool"] == "r")
    assert all("match_ids" in h for h in history if h["pool"] == "x")
    last = {(h["pool"], h["player"]): h for h in history}
    fields = ("rating_before", "mu_before", "sigma_before", "delta", "round_id", "matches", "match_ids",
              "performance")
    assert records == {k: [h["version"], h["event_id"], h["time"], {f: h[f] for f in fields if f in h}]
                       for k, h in last.items()}


def test_partly_redelivered_batch_applies_only_the_new_messages(redis_url: str) -> None:
    """A take batch that starts with messages applied before (a consumer restarting from an
    older committed offset) and goes on with new ones ends in the state of one clean pass,
    through the optimistic commit (refused) and the re-read; with cache and without."""
    msgs = _match_msgs(240, 20, 9)

    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            ref_store = _store(redis_url)
            await Processor(Settings(system="elo"), ref_store, ex).process(msgs)
            want = await _state(ref_store)
            for budget in (0, 256 << 20):
                store = _store(redis_url)
                proc = Processor(Settings(system="elo"), store, ex)
                proc.cache = BeliefCache(budget)
                await proc.process(msgs[:5])
                again = await proc.process(msgs[3:9])  # 3, 4 applied before; 5..8 new
                await proc.process(msgs[9:])
                assert await _state(store) == want, budget
                cited = {o.event_id for o in again.outputs}
                assert cited <= {f"m{i}" for i in range(60, 180)} and len(again.outputs) == 9
                await store.close()
            await ref_store.close()

    asyncio.run(run())


def test_bulk_commit_and_snapshot_blobs(redis_url: str) -> None:
    """More players/ids than one MSET/ZADD/SMISMEMBER/MGET chunk, non-ASCII and binary values."""
    async def run() -> None:
        store = _store(redis_url)
        names = [f"pl-{i}-ü€" for i in range(9001)]
        values = {p: bytes([i % 256, 0, 255]) + p.encode() for i, p in enumerate(names)}
        ids = [f"ev-{i}-ß" for i in range(8500)]
        c = Commit(beliefs=values, scores={p: float(i) - 0.25 for i, p in enumerate(names)}, event_ids=ids)
        assert await store.commit("pool ü", "0", c) == 1
        asked = [*names[:4500], "nobody", *names[4500:]]
        snap = await store.snapshot("pool ü", asked, [*ids[::2], "unknown"])
        assert snap.gen == "1" and snap.seen == set(ids[::2])
        assert snap.beliefs == {**values, "nobody": None} and list(snap.beliefs) == asked
        assert (await store.page("pool ü", 0, 2))[0] == [(names[-1], 8999.75), (names[-2], 8998.75)]
        empty = await store.snapshot("pool ü", [], [])
        assert empty.gen == "1" and empty.beliefs == {} and not empty.seen
        await store.close()

    asyncio.run(run())


def test_optimistic_commit_refuses_applied_ids(redis_url: str) -> None:
    """``check_ids``: one applied id anywhere (here past the first 4,000-id chunk) refuses the whole commit."""
    async def run() -> None:
        store = _store(redis_url)
        assert await store.commit("p", "0", Commit(beliefs={"a": b"\x01a"}, scores={"a": 1.0}, event_ids=["old"])) == 1
        ids = [f"e{i}" for i in range(4500)] + ["old"]
        c = Commit(beliefs={"a": b"\x01b", "b": b"\x01c"}, scores={"a": 2.0, "b": 3.0}, event_ids=ids)
        with pytest.raises(AlreadyApplied):
            await store.commit("p", "1", c, check_ids=True)
        snap = await store.snapshot("p", ["a", "b"], ids)
        assert snap.gen == "1" and snap.beliefs == {"a": b"\x01a", "b": None} and snap.seen == {"old"}
        c.event_ids = ids[:-1]
        assert await store.commit("p", "1", c, check_ids=True) == 2
        assert (await store.snapshot("p", ["b"], [])).beliefs == {"b": b"\x01c"}
        await store.close()

    asyncio.run(run())


def test_optimistic_commit_refuses_applied_offsets(redis_url: str) -> None:
    """``check_ids`` with offsets: a first offset at or below the stored watermark refuses the
    commit; offsets without a first one only advance the watermark, which never moves back."""
    async def run() -> None:
        store = _store(redis_url)
        assert await store.commit("p", "0", Commit(beliefs={"a": b"1"}, scores={"a": 1.0},
                                                   offsets={"m/0": (5, 9), "r/1": (None, 3)})) == 1
        repeated: list[dict[str, tuple[int | None, int]]] = [{"m/0": (9, 12)}, {"m/1": (0, 1), "m/0": (3, 12)}]
        for offsets in repeated:
            with pytest.raises(AlreadyApplied):
                await store.commit("p", "1", Commit(beliefs={"a": b"2"}, scores={"a": 2.0}, offsets=offsets),
                                   check_ids=True)
        snap = await store.snapshot("p", ["a"], [], ["m/0", "r/1", "m/7"])
        assert snap.gen == "1" and snap.beliefs == {"a": b"1"} and snap.watermarks == {"m/0": 9, "r/1": 3}
        c = Commit(beliefs={"a": b"3"}, scores={"a": 3.0}, offsets={"m/0": (10, 11), "r/1": (None, 2)})
        assert await store.commit("p", "1", c, check_ids=True) == 2
        assert (await store.snapshot("p", [], [], ["m/0", "r/1"])).watermarks == {"m/0": 11, "r/1": 3}
        await store.close()

    asyncio.run(run())


def _match_msgs(n: int, per_msg: int, players: int, seed: int = 5) -> list[Message]:
    import random

    rng = random.Random(seed)
    out = []
    for k in range(0, n, per_msg):
        ms = [{"event_id": f"m{i}", "time": i, "a": f"p{(a := rng.randrange(players))}",
               "b": f"p{(a + 1 + rng.randrange(players - 1)) % players}", "score": rng.choice((0.0, 0.5, 1.0))}
              for i in range(k, min(n, k + per_msg))]
        out.append(Message("in", 0, k, orjson.dumps({"type": "match_batch", "pool": "x", "matches": ms})))
    return out


async def _state(store: RedisStore) -> dict[str, bytes]:
    return {p: v for chunk in [x async for x in store.scan_players("x")] for p, v in chunk}


@pytest.mark.parametrize("system", ["elo", "cowan"])
def test_belief_cache_is_exact_with_two_writers_and_any_budget(redis_url: str, system: str) -> None:
    """Two processors (two workers during a rebalance) alternate on one pool, with the belief
    cache disabled, tiny (pools dropped all the time) and default: every run ends in the
    bytes one processor alone writes, with each match applied once -- recognised by event id."""
    from stream.state.cache import BeliefCache

    msgs = _match_msgs(300, 20, 12)

    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            ref_store = _store(redis_url)
            ref = Processor(Settings(system=system), ref_store, ex)
            for m in msgs:
                await ref.process([m])
            want = await _state(ref_store)
            assert len(want) == 12
            for budget in (0, 2000, 256 << 20):
                store = _store(redis_url)
                other = RedisStore(store.r, store.prefix)
                procs = [Processor(Settings(system=system), s, ex) for s in (store, other)]
                for p in procs:
                    p.cache = BeliefCache(budget)
                for i, m in enumerate(msgs):
                    await procs[(i // 3) % 2].process([m])
                    if i % 7 == 0:  # a re-delivery to the other one (its cache is stale): a no-op
                        await procs[1 - (i // 3) % 2].process([m])
                assert await _state(store) == want, budget
                seen = (await store.pool_counts("x"))["event_ids_recorded"]
                assert seen == 300
                assert await store.r.hget(store.key("x", "wm"), "in/0") == b"280"
                await store.close()
            await ref_store.close()

    asyncio.run(run())


def test_predecoded_messages_give_the_same_result(redis_url: str) -> None:
    """``predecode`` (the worker decodes as it takes) changes nothing: the same Redis state,
    outputs and dead letters as decoding inside ``process``, for valid, invalid and unusual input."""
    matches = [{"event_id": f"m{i}", "time": i, "a": f"p{i % 7}", "b": f"p{(i + 3) % 7}", "score": (i % 3) / 2}
               for i in range(60)]
    cols = {k: [m[k] for m in matches[40:]] for k in ("event_id", "time", "a", "b", "score")}
    raw = [orjson.dumps({"type": "match_batch", "pool": "x", "matches": matches[:20]}),
           orjson.dumps({"type": "match", "pool": "x", **{**matches[20], "time": 20.0}}),  # valid, not plain
           b"garbage", orjson.dumps({"type": "match", "pool": "x", **matches[21], "b": matches[21]["a"]}),
           orjson.dumps({"type": "match_batch", "pool": "x", "matches": matches[22:40]}),
           orjson.dumps({"type": "match_columns", "pool": "x", **cols})]

    async def state(predecode: bool, prefix: str) -> tuple[dict[str, bytes], list[Any], list[str]]:
        store = RedisStore.from_url(redis_url, prefix=prefix)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo"), store, ex)
            msgs = [Message("in", 0, k, v) for k, v in enumerate(raw)]
            if predecode:
                proc.predecode(msgs)
                assert all(m.decoded is not None for m in msgs)
            res = await proc.process(msgs)
        beliefs = {p: v for chunk in [x async for x in store.scan_players("x")] for p, v in chunk}
        keys = [k async for k in store.r.scan_iter(match=f"{prefix}:*")]
        await store.r.delete(*keys)
        await store.close()
        return beliefs, res.outputs, [d.reason for d in res.dead]

    async def run() -> None:
        plain = await state(False, "t-plain")
        pre = await state(True, "t-pre")
        assert plain == pre and len(plain[0]) == 7 and len(plain[2]) == 2

    asyncio.run(run())


@pytest.mark.parametrize("system", ["elo", "cowan", "elo-mmr"])
def test_a_corrupt_stored_belief_dead_letters_its_events_and_nothing_else(redis_url: str, system: str) -> None:
    """A stored value that is not a belief (truncated here) makes the events of that player
    dead letters naming the player; the other matches of the same message and batch are
    applied, and the processor goes on (the codec's ValueError must not stop the worker)."""

    def msg(offset: int, body: dict[str, Any]) -> Message:
        return Message("in", 0, offset, orjson.dumps({"pool": "x", **body}))

    first = [{"event_id": f"m{i}", "time": i, "a": f"p{i % 4}", "b": f"p{(i + 1) % 4}", "score": 1.0}
             for i in range(4)]
    later = [{"event_id": "n1", "time": 10, "a": "p1", "b": "p2", "score": 1.0},
             {"event_id": "n2", "time": 11, "a": "p0", "b": "p3", "score": 1.0},
             {"event_id": "n3", "time": 12, "a": "p2", "b": "p3", "score": 0.0}]
    rnd = {"type": "round", "event_id": "r1", "round_id": "r1", "time": 13,
           "standings": [{"player": "p0", "rank": 1}, {"player": "p1", "rank": 2}]}

    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            settings = Settings(system=system)
            proc = Processor(settings, store, ex)
            if system == "elo-mmr":  # a rounds pool: the same players, rated by a round first
                standings = [{"player": f"p{i}", "rank": i + 1} for i in range(4)]
                await proc.process([msg(0, {"type": "round", "event_id": "r0", "round_id": "r0", "time": 0,
                                            "standings": standings})])
            else:
                await proc.process([msg(0, {"type": "match_batch", "matches": first})])
            before = await _state(store)
            await store.r.set(store.player_key("x", "p0"), before["p0"][:-5])
            proc = Processor(settings, store, ex)  # a worker started after the damage (no cached copy)
            res = await proc.process([msg(1, {"type": "match_batch", "matches": later}), msg(2, rnd)])
            after = await _state(store)
        reasons = {d.event_id: d.reason for d in res.dead}
        assert set(reasons) == {"n2", "r1"}, reasons
        assert all(r.startswith("rating: ") and "'p0'" in r for r in reasons.values()), reasons
        assert {o.player for o in res.outputs} == {"p1", "p2", "p3"}
        assert after["p0"] == before["p0"][:-5]  # left as it was, for the operator
        assert all(after[p] != before[p] for p in ("p1", "p2", "p3"))
        await store.close()

    asyncio.run(run())


@pytest.mark.parametrize("meta", [{"system": "elo", "params": {"k": "inf"}},  # a value the checks refuse
                                  {"system": "elo-2030", "params": {}},  # a system this version does not know
                                  {"system": "elo", "params": {"kappa": "3"}}])  # a parameter it does not know
def test_a_pool_whose_stored_system_is_refused_dead_letters_its_events_only(redis_url: str,
                                                                           meta: dict[str, Any]) -> None:
    """A pool meta written by another version that this one cannot build: every event of
    that pool (matches, whole rounds, assembled rounds) is a dead letter whose reason names
    the pool and the refused setting; the other pool of the same batch is rated, and the
    meta is left for the operator (not a batch that fails as a whole, is retried message by
    message and ends as "internal error")."""

    def msg(offset: int, pool: str, body: dict[str, Any]) -> Message:
        return Message("in", 0, offset, orjson.dumps({"pool": pool, **body}))

    def match(pool: str, eid: str) -> dict[str, Any]:
        return {"type": "match", "event_id": eid, "time": 1, "a": "p0", "b": "p1", "score": 1.0}

    standings = [{"player": "p0", "rank": 1}, {"player": "p1", "rank": 2}]
    batch = [msg(0, "x", match("x", "x1")), msg(1, "y", match("y", "y1")),
             msg(2, "x", {"type": "round", "event_id": "xr", "round_id": "R0", "time": 2, "standings": standings}),
             msg(3, "x", {"type": "round_result", "event_id": "xa", "round_id": "R1", "time": 3, "player": "p0",
                          "rank": 1}),
             msg(4, "x", {"type": "round_completed", "event_id": "xc", "round_id": "R1", "time": 3,
                          "participants": 1}),
             msg(5, "y", match("y", "y2"))]

    async def run() -> None:
        store = _store(redis_url)
        await store.r.hset(store.key("x", "meta"),
                           mapping={"system": meta["system"], "params": orjson.dumps(meta["params"]), "keys": "2"})
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo"), store, ex)
            res = await proc.process(batch)
            again = await proc.process([msg(6, "x", match("x", "x2")),
                                        msg(7, "x", {"type": "round_result", "event_id": "xb", "round_id": "R1",
                                                     "time": 4, "player": "p1", "rank": 2})])
            labels = proc.metrics.registry.get_sample_value("mmr_dead_letters_total", {"reason": "pool_config"})
        dead = sorted((d.offset, d.event_id) for d in res.dead)
        assert dead == [(0, None), (2, "xr"), (4, "xc")], res.dead
        refused = meta["system"] if meta["system"] != "elo" else next(iter(meta["params"]))
        for d in res.dead:
            assert d.reason.startswith("pool config: pool 'x'") and refused in d.reason, d.reason
            assert d.pool == "x" and d.original == batch[d.offset].value
        assert sorted((o.pool, o.player, o.version) for o in res.outputs) == [("y", "p0", 2), ("y", "p1", 2)]
        # the next batch is refused the same way; the round's late result is not collected again
        late = {d.offset: d.reason for d in again.dead}
        assert sorted(late) == [6, 7] and not again.outputs
        assert late[6].startswith("pool config: ") and "already rated (late event)" in late[7], late
        assert labels == 4
        assert await store.meta("x") == meta
        assert await store.pools() == ["y"]
        with pytest.raises(PoolConfigError, match=f"pool 'x': .*{refused}"):  # mmr export names it too
            await export_rows(store, ["x"])
        await store.close()

    asyncio.run(run())


def test_adversarial_names_keep_their_pools_apart(redis_url: str) -> None:
    """Pool ``kc}:p:x``'s leaderboard was the key of pool ``kc``'s player ``x}:lb``: one match of that
    player turned it into a string, and every later event of the other pool failed. Now each name
    has its own keys: both pools are rated, both leaderboards stay sorted sets, export reads both."""
    def match(offset: int, pool: str, a: str, b: str) -> Message:
        return Message("in", 0, offset, orjson.dumps({"type": "match", "pool": pool, "event_id": f"e{offset}",
                                                      "time": offset, "a": a, "b": b, "score": 1.0}))

    msgs = [match(0, "kc}:p:x", "u", "v"), match(1, "kc", "x}:lb", "y"), match(2, "kc}:p:x", "v", "u"),
            match(3, "kc", "y", "x}:gen"), match(4, "kc", "{kc}", "%7D"), match(5, "kc}:p:x", "w:1", "u")]

    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            res = await Processor(Settings(system="elo"), store, ex).process(msgs)
        assert res.dead == []
        assert await store.r.type(store.key("kc}:p:x", "lb")) == b"zset"
        assert await store.r.type(store.key("kc", "lb")) == b"zset"
        assert {p for p, _ in (await store.page("kc", 0, 10))[0]} == {"x}:lb", "y", "x}:gen", "{kc}", "%7D"}
        assert {p for p, _ in (await store.page("kc}:p:x", 0, 10))[0]} == {"u", "v", "w:1"}
        assert await store.pools() == ["kc", "kc}:p:x"]
        rows = await export_rows(store, ["kc"])
        assert sorted(r["player"] for r in rows) == ["%7D", "x}:gen", "x}:lb", "y", "{kc}"]
        assert len(await export_rows(store)) == 8
        assert set((await store.beliefs("kc", ["x}:lb", "%7D"])).values()) != {None}
        await store.close()

    asyncio.run(run())


@pytest.mark.parametrize(("suffix", "plant"), [("lb", "string"), ("done", "string"), ("ids", "zset"),
                                               ("wm", "bad offset"), ("gen", "not a number"), ("meta", "list"),
                                               ("chg", "string")])
def test_a_commit_onto_a_key_of_the_wrong_kind_writes_nothing(redis_url: str, suffix: str, plant: str) -> None:
    """The commit's check looks at every key before its first write: a key of another type (or a counter
    or an offset that is no number) refuses the whole commit with StateError naming the key, and no
    belief, leaderboard entry, id, offset or round mark is written (a failing command in the middle of
    a script or a transaction does not undo the ones before it)."""
    from stream.state.redis_store import StateError

    async def run() -> None:
        store = _store(redis_url)
        key = store.key("p", suffix)
        if plant == "string":
            await store.r.set(key, "x")
        elif plant == "zset":
            await store.r.zadd(key, {"x": 1.0})
        elif plant == "list":
            await store.r.rpush(key, "x")
        elif plant == "bad offset":
            await store.r.hset(key, "in/0", "soon")
        else:
            await store.r.set(key, "soon")
        pool_keys = f"{store.prefix}:{{p}}:*"  # (the list of pools is written before, on its own)
        before = {k: await store.r.dump(k) async for k in store.r.scan_iter(match=pool_keys)}
        c = Commit(beliefs={"a": b"\x01a", "b": b"\x01b"}, scores={"a": 1.0, "b": 2.0}, event_ids=["e1"],
                   done_rounds=["r1"], offsets={"in/0": (None, 3)}, changes={"a": b'[1,"e1",1,{}]'})
        await store.r.hset(store.keys.pend_key("p", "r1"), "e0", "{}")
        before[store.keys.pend_key("p", "r1").encode()] = await store.r.dump(store.keys.pend_key("p", "r1"))
        gen = "soon" if plant == "not a number" else "0"
        with pytest.raises(StateError, match=key.replace("{", r"\{").replace("}", r"\}")):
            await store.commit("p", gen, c, {"system": "elo", "params": {}})
        after = {k: await store.r.dump(k) async for k in store.r.scan_iter(match=pool_keys)}
        assert after == before
        await store.close()

    asyncio.run(run())


def test_the_applied_ids_gauge_reads_the_stores_indexes(redis_url: str) -> None:
    """The worker's gauge ``mmr_applied_ids_index_bytes`` is its store's indexes of applied ids: none
    before a pool is read, their bytes once read, none again after ``forget_ids``."""
    from stream.service.app import create_app
    from stream.service.config import from_env

    s = from_env({"MMR_KEY_PREFIX": f"t{uuid.uuid4().hex[:8]}", "MMR_HTTP_PORT": "0"}).with_(redis_url=redis_url)
    svc = create_app(s)

    def gauge() -> float | None:
        return svc.metrics.registry.get_sample_value("mmr_applied_ids_index_bytes")

    async def run() -> None:
        assert gauge() == 0
        await svc.store.commit("p", "0", Commit(event_ids=["a", "b"]), check_ids=True)
        assert (await svc.store.snapshot("p", [], ["a"])).seen == {"a"}
        assert gauge() == _index(svc.store, "p").nbytes > 0
        svc.store.forget_ids()
        assert gauge() == 0
        await svc.store.close()

    asyncio.run(run())


def _interfering(store: RedisStore, times: int) -> list[int]:
    """Makes another client open a round of pool ``p`` (as round assembly does: its ``:open`` is watched)
    right after each of the store's first ``times`` commit checks, before its transaction; returns the
    count of checks, which grows as the test runs."""
    other = RedisStore(store.r, prefix=store.prefix)
    checks = [0]
    round_trip = store._round_trip

    async def interfere(conn: Any, commands: Any) -> list[Any]:
        replies = await round_trip(conn, commands)
        if isinstance(commands[0], tuple) and commands[0][0] == "WATCH":
            checks[0] += 1
            if checks[0] <= times:
                await other.r.zadd(store.key("p", "open"), {f"r{checks[0]}": 1.0})
        return replies

    store._round_trip = interfere  # type: ignore[method-assign]
    return checks


def test_a_commit_whose_watched_keys_change_before_its_transaction_is_checked_again(redis_url: str) -> None:
    """Between a commit's check and its MULTI/EXEC another client changes a watched key (here a round
    opened in the pool): EXEC writes nothing, the commit is checked again and then applied once, and the
    other client's write is kept."""
    async def run() -> None:
        store = _store(redis_url)
        checks = _interfering(store, times=2)
        c = Commit(beliefs={"a": b"\x01a"}, scores={"a": 1.0}, event_ids=["e1"], changes={"a": b"{}"})
        assert await store.commit("p", "0", c, {"system": "elo", "params": {}}) == 1
        assert checks[0] == 3
        assert (await store.beliefs("p", ["a"])) == {"a": b"\x01a"}
        assert await store.r.zrange(store.key("p", "open"), 0, -1) == [b"r1", b"r2"]
        assert await store.r.hgetall(store.key("p", "chg")) == {b"a": b"{}"}
        await store.close()

    asyncio.run(run())


def test_a_commit_whose_watched_keys_keep_changing_is_a_conflict_that_wrote_nothing(redis_url: str) -> None:
    from stream.state.redis_store import COMMIT_TRIES

    async def run() -> None:
        store = _store(redis_url)
        checks = _interfering(store, times=COMMIT_TRIES)
        c = Commit(beliefs={"a": b"\x01a"}, scores={"a": 1.0}, event_ids=["e1"])
        with pytest.raises(Conflict):
            await store.commit("p", "0", c, {"system": "elo", "params": {}})
        assert checks[0] == COMMIT_TRIES
        assert await store.r.get(store.key("p", "gen")) is None
        assert (await store.beliefs("p", ["a"])) == {"a": None}
        assert await store.r.exists(store.key("p", "lb"), store.key("p", "ids")) == 0
        # the connection holds no WATCH or MULTI: the next commit goes through
        assert await store.commit("p", "0", c, {"system": "elo", "params": {}}) == 1
        await store.close()

    asyncio.run(run())


def test_redis_py_keeps_the_stream_a_commit_writes_its_frames_to(redis_url: str) -> None:
    """The commit writes its frames to redis-py's private ``_writer`` of a connection
    (stream.state.replication ``_send``), falling back to ``send_packed_command``'s copies without one:
    an upgrade of redis-py that moves it fails here, not silently in the worker's CPU."""
    async def run() -> None:
        store = _store(redis_url)
        await store.r.ping()
        conn = await store.r.connection_pool.get_connection()
        try:
            assert conn.is_connected and isinstance(conn._writer, asyncio.StreamWriter)
        finally:
            await store.r.connection_pool.release(conn)
        await store.close()

    asyncio.run(run())


def test_a_pool_written_before_names_were_escaped_is_refused(redis_url: str) -> None:
    """A meta without the key format is a pre-release build's (names not escaped): not migrated, refused
    by ``meta`` and by a commit (nothing written)."""
    from stream.state.redis_store import StateError

    async def run() -> None:
        store = _store(redis_url)
        await store.r.set(store.key("old", "gen"), "3")
        await store.r.hset(store.key("old", "meta"), mapping={"system": "elo", "params": "{}"})
        with pytest.raises(StateError, match="mmr rebuild"):
            await store.meta("old")
        with pytest.raises(StateError):
            await store.commit("old", "3", Commit(beliefs={"c": b"\x01new"}, scores={"c": 1.0}))
        assert await store.r.get(store.player_key("old", "c")) is None
        await store.close()

    asyncio.run(run())


_fuzz_names = st.text(min_size=1, max_size=8) | st.text(alphabet="{}:%p\\*?[]", min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pool=_fuzz_names,
       steps=st.lists(st.tuples(st.dictionaries(_fuzz_names, st.tuples(st.binary(max_size=24),
                                                                       st.floats(-1e12, 1e12)), max_size=6),
                                st.lists(_fuzz_names, max_size=4, unique=True),
                                st.lists(_fuzz_names, max_size=2, unique=True),
                                st.dictionaries(st.sampled_from(["m/0", "r:1/2", "{x}/3"]),
                                                st.integers(0, 2**40), max_size=2)),
                      min_size=1, max_size=4))
def test_fuzzed_commits_read_back_exactly(redis_url: str, pool: str, steps: list[Any]) -> None:
    """Any names (the structural characters of keys and globs included), values, scores, ids,
    rounds and offsets: what the scripts store reads back exactly -- beliefs by snapshot and by
    scan, the leaderboard's scores, the applied ids, the finished rounds, the watermarks."""
    async def run() -> None:
        store = _store(redis_url)
        beliefs: dict[str, bytes] = {}
        scores: dict[str, float] = {}
        ids: set[str] = set()
        rounds: set[str] = set()
        wms: dict[str, int] = {}
        gen = "0"
        for k, (vals, eids, done, offs) in enumerate(steps):
            fresh = [f"{k}/{e}" for e in eids]
            c = Commit(beliefs={p: v for p, (v, _) in vals.items()}, scores={p: s for p, (_, s) in vals.items()},
                       event_ids=fresh, done_rounds=done, offsets={tp: (None, o) for tp, o in offs.items()})
            gen = str(await store.commit(pool, gen, c, {"system": "elo", "params": {}} if k == 0 else None,
                                         check_ids=True))
            beliefs.update(c.beliefs)
            scores.update(c.scores)
            ids.update(fresh)
            rounds.update(done)
            for tp, o in offs.items():
                wms[tp] = max(o, wms.get(tp, o))
        snap = await store.snapshot(pool, [*beliefs, "absent"], [*ids, "never"], [*wms, "none/0"])
        assert snap.gen == str(len(steps)) and snap.seen == ids and snap.watermarks == wms
        assert snap.beliefs == {**beliefs, "absent": None}
        assert dict(x for part in [y async for y in store.scan_players(pool)] for x in part) == beliefs
        assert dict((await store.page(pool, 0, 1000))[0]) == scores
        assert (await store.round_state(pool, [*rounds, "open"]))[0] == rounds
        assert await store.pools() == [pool]
        await store.close()

    asyncio.run(run())
