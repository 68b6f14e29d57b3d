"""A pool's next steps rated while the steps before them commit, as a chain (stream.service.ahead), on a
real Redis.

A batch of rounds cut into many steps (``max_step_players``) must leave exactly the state and the
outputs it leaves when every step is read and rated after the commit before it; a commit by another
writer between two steps must refuse the step rated ahead (it was rated from a state that is no
longer the pool's) and the step is rated again from the new state; a commit before that does not
land drops the step rated ahead, whose dead letters are then never made nor counted.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from ahead_utils import (
    UNRELATED_ROUND,
    around_commit,
    make_round,
    new_store,
    other_writer,
    outputs,
    poisoned_round,
    pool_state,
    rated_ahead,
    total,
)
from cluster_utils import LocalCluster

from stream.service.config import Settings
from stream.service.metrics import Metrics
from stream.service.processor import Processor

pytestmark = pytest.mark.integration

ROUNDS = [make_round(k) for k in range(12)]


def _settings(ahead: bool) -> Settings:
    return Settings(system="elo-mmr", max_step_players=60, rate_ahead=ahead)  # ~one round a step


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_steps_rated_ahead_leave_what_steps_rated_in_turn_leave(redis_url: str, depth: int) -> None:
    """... however many steps are rated ahead of the commit in flight (``rate_ahead_depth``)."""
    async def run() -> None:
        results: dict[bool, tuple[list[tuple[Any, ...]], dict[str, bytes | None], Metrics]] = {}
        with ThreadPoolExecutor(1) as ex:
            for ahead in (False, True):
                store = new_store(redis_url)
                proc = Processor(replace(_settings(ahead), rate_ahead_depth=depth), store, ex)
                res = await proc.process(ROUNDS)
                assert not res.dead
                results[ahead] = (outputs(res), await pool_state(store), proc.metrics)
                await store.close()
        (out_turn, state_turn, m_turn), (out_ahead, state_ahead, m_ahead) = results[False], results[True]
        assert out_ahead == out_turn
        assert state_ahead == state_turn
        assert rated_ahead(m_turn, "landed") == 0
        assert rated_ahead(m_ahead, "landed") >= 8, "the steps were not rated ahead"  # 12 rounds, ~1 a step
        assert rated_ahead(m_ahead, "refused") == rated_ahead(m_ahead, "dropped") == 0
        for m in (m_turn, m_ahead):  # each step's rating and commit timed once (``mmr_step_seconds``)
            commits = total(m, "mmr_batches")
            assert commits >= 10 and _step_phase(m, "commit") == _step_phase(m, "rate") == commits

    asyncio.run(run())


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_chain_rates_up_to_depth_steps_beyond_the_commit_in_flight(redis_url: str, depth: int) -> None:
    """With commits slower than ratings, the ``depth`` steps after a commit are rated while it is in flight
    (a chain: each as soon as the one before it), never more: when the k-th commit is sent, at most
    k + depth steps have been handed to the numba thread, and mostly that many (the timing is the
    machine's: a step of the chain may still be rated when a commit is sent)."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            store = new_store(redis_url)
            rated = 0  # steps handed to the numba thread
            submit = ex.submit

            def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                nonlocal rated
                rated += 1
                return submit(fn, *args, **kwargs)

            ex.submit = counted  # type: ignore[method-assign]
            commit = store.commit
            at_commit: list[int] = []

            async def slow(*args: Any, **kwargs: Any) -> int:
                await asyncio.sleep(0.15)  # the numba thread rates ahead meanwhile
                at_commit.append(rated)
                return await commit(*args, **kwargs)

            store.commit = slow  # type: ignore[method-assign]
            proc = Processor(replace(_settings(True), rate_ahead_depth=depth), store, ex)
            res = await proc.process(ROUNDS)
            steps = len(at_commit)
            assert steps >= 10 and rated == steps  # each step rated once: ahead, but for the first
            full = [min(k + depth, steps) for k in range(1, steps + 1)]
            assert all(a <= f for a, f in zip(at_commit, full, strict=True)), (at_commit, full)
            assert sum(a == f for a, f in zip(at_commit, full, strict=True)) >= steps // 2, (at_commit, full)
            assert len(res.outputs) > 0
            await store.close()

    asyncio.run(run())


def _step_phase(m: Metrics, phase: str) -> float:
    return sum(s.value for fam in m.registry.collect() if fam.name == "mmr_step_seconds" for s in fam.samples
               if s.name == "mmr_step_seconds_count" and s.labels["phase"] == phase)


def test_steps_rated_ahead_on_a_redis_cluster_leave_what_they_leave_on_one_redis(
        redis_cluster: LocalCluster, redis_url: str) -> None:
    """The read of the players a commit does not write goes to the pool's node as every read does."""
    async def run() -> None:
        got = []
        with ThreadPoolExecutor(1) as ex:
            for url in (redis_url, redis_cluster.url):
                store = new_store(url)
                proc = Processor(_settings(True), store, ex)
                res = await proc.process(ROUNDS)
                got.append((outputs(res), await pool_state(store), rated_ahead(proc.metrics, "landed")))
                await store.close()
        assert got[1][:2] == got[0][:2]
        assert got[1][2] >= 8

    asyncio.run(run())


def test_another_writer_between_two_steps_refuses_the_step_rated_ahead(redis_url: str) -> None:
    """After the first step's commit another writer rates a round of the same players; the second
    step, rated ahead from the state before that round, is refused and rated again from it: the
    pool ends as if the other round had come between the first two rounds of the batch."""
    foreign = make_round(0, size=100, seed=1)

    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            ref = new_store(redis_url)
            proc = Processor(_settings(False), ref, ex)
            want = [await proc.process(ROUNDS[:1]), await proc.process([foreign]),
                    await proc.process(ROUNDS[1:])]
            want_state = await pool_state(ref)
            await ref.close()

            store = new_store(redis_url)
            other, other_proc = other_writer(redis_url, store, _settings(False), ex)

            async def write() -> None:
                await other_proc.process([foreign])

            around_commit(store, 1, write)
            proc = Processor(_settings(True), store, ex)
            got = await proc.process(ROUNDS)
            assert outputs(got) == outputs(want[0]) + outputs(want[2])
            assert await pool_state(store) == want_state
            assert rated_ahead(proc.metrics, "refused") == 1
            assert proc.metrics.conflicts._value.get() == 1
            await other.close()
            await store.close()

    asyncio.run(run())


def test_a_step_rated_ahead_of_a_commit_that_did_not_land_makes_no_dead_letter(redis_url: str) -> None:
    """The first step's commit is refused (another writer came first), so the second step, rated
    ahead meanwhile, is dropped; that step holds a round of a player whose stored belief is not a
    belief: its dead letter is made, and counted, once."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            store = new_store(redis_url)
            first = make_round(0, size=50)
            second = await poisoned_round(store, first)
            other, other_proc = other_writer(redis_url, store, _settings(False), ex)

            async def write() -> None:
                await other_proc.process([UNRELATED_ROUND])

            around_commit(store, 1, write, before=True)
            proc = Processor(Settings(system="elo-mmr", max_step_players=50, rate_ahead=True), store, ex)
            res = await proc.process([first, second])
            assert [d.event_id for d in res.dead] == ["bad"]
            assert proc.metrics.dead_letters.labels("rating")._value.get() == 1
            assert rated_ahead(proc.metrics, "dropped") == 1
            await other.close()
            await store.close()

    asyncio.run(run())


def test_the_next_steps_players_are_read_before_the_commit_is_sent(redis_url: str) -> None:
    """Redis runs one command at a time: a read sent after a commit's script waits until the script has run,
    and the rating ahead with it. With one step rated ahead at a time (``rate_ahead_depth=1``), the players
    of the next step that the commit does not write (newcomers, here) are read before the commit is sent,
    never while it is in flight (deeper, a step's players are read while the step before it is rated)."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            store = new_store(redis_url)
            commit, beliefs = store.commit, store.beliefs
            in_flight = False
            reads: list[bool] = []  # per read of beliefs: whether a commit was in flight

            async def committing(*args: Any, **kwargs: Any) -> int:
                nonlocal in_flight
                in_flight = True
                try:
                    return await commit(*args, **kwargs)
                finally:
                    in_flight = False

            async def reading(*args: Any, **kwargs: Any) -> dict[str, bytes | None]:
                reads.append(in_flight)
                return await beliefs(*args, **kwargs)

            store.commit = committing  # type: ignore[method-assign]
            store.beliefs = reading  # type: ignore[method-assign]
            proc = Processor(replace(_settings(True), rate_ahead_depth=1), store, ex)
            await proc.process(ROUNDS)
            assert rated_ahead(proc.metrics, "landed") >= 8
            assert reads, "no step rated ahead read its newcomers"
            assert not any(reads), f"{sum(reads)} of {len(reads)} reads were sent while a commit was in flight"
            await store.close()

    asyncio.run(run())
