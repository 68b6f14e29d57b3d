"""A pool's steps of the next batch rated while the batch's last steps of it commit: the chain of
ratings ahead going on into the next batch (``MMR_RATE_AHEAD_BATCHES``, stream.service.ahead ``Chain``,
``NextBatch``), on a real Redis.

Batches of rounds fed in order (by the processor's ``upcoming``, as the batch pipeline's ``peek``
does, or through a real ``BatchPipeline``) must leave exactly the state and the outputs they leave
when each batch is planned and rated only once the batch before it has ended; another writer between
two batches refuses the step rated ahead; a commit before it that does not land leaves no trace of it
(no dead letter made, nothing counted twice); a Redis restart drops it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
from local_servers import RedisServer

from stream.service import step as step_module
from stream.service.config import Settings
from stream.service.metrics import Metrics
from stream.service.pipeline import BatchPipeline
from stream.service.planning import Op
from stream.service.processor import BatchResult, Message, Processor
from stream.state.fence import ServerFence

pytestmark = pytest.mark.integration

ROUNDS = [make_round(k) for k in range(12)]
BATCHES = [ROUNDS[i:i + 2] for i in range(0, 12, 2)]  # two steps each (``max_step_players``)


def _settings(across: bool, **kw: Any) -> Settings:
    return Settings(system="elo-mmr", max_step_players=60, rate_ahead=True, rate_ahead_batches=across, **kw)


async def _in_order(proc: Processor, batches: Sequence[list[Message]]) -> list[BatchResult]:
    """Each batch processed once the one before has ended, the next one ``upcoming`` meanwhile."""
    out = []
    for i, batch in enumerate(batches):
        nxt = batches[i + 1] if i + 1 < len(batches) else None
        proc.upcoming = lambda nxt=nxt: nxt  # type: ignore[misc]
        out.append(await proc.process(batch))
    return out


async def _reference(redis_url: str, ex: ThreadPoolExecutor, batches: Sequence[list[Message]],
                     ) -> tuple[list[BatchResult], dict[str, bytes | None]]:
    store = new_store(redis_url)
    proc = Processor(_settings(False), store, ex)
    res = [await proc.process(b) for b in batches]
    state = await pool_state(store)
    await store.close()
    return res, state


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_batches_rated_ahead_leave_what_batches_rated_in_turn_leave(redis_url: str, depth: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """... however many steps are rated ahead (``rate_ahead_depth``); and a batch whose steps were rated
    ahead steps through its ops as they were cut then."""
    cuts: list[int] = []  # the batch's own cuts (``PoolStep.apply_pool``), by ops
    cut_steps = step_module.split_steps

    def counted(ops: list[Op], max_players: int) -> list[list[Op]]:
        cuts.append(len(ops))
        return cut_steps(ops, max_players)

    monkeypatch.setattr(step_module, "split_steps", counted)

    async def run() -> None:
        got: dict[bool, tuple[list[list[tuple[Any, ...]]], dict[str, bytes | None], Metrics]] = {}
        with ThreadPoolExecutor(1) as ex:
            for across in (False, True):
                cuts.clear()
                store = new_store(redis_url)
                proc = Processor(_settings(across, rate_ahead_depth=depth), store, ex)
                res = await _in_order(proc, BATCHES)
                assert len(cuts) == (1 if across else len(BATCHES))  # across: only the first batch
                assert not any(r.dead for r in res)
                got[across] = ([outputs(r) for r in res], await pool_state(store), proc.metrics)
                await store.close()
        (out_off, state_off, m_off), (out_on, state_on, m_on) = got[False], got[True]
        assert out_on == out_off
        assert state_on == state_off
        assert rated_ahead(m_off, "landed") == 6  # the second step of each batch
        assert rated_ahead(m_on, "landed") == 11, "the batches' first steps were not rated ahead"
        assert rated_ahead(m_on, "refused") == rated_ahead(m_on, "dropped") == 0
        assert m_on.messages_in.labels("rounds")._value.get() == m_off.messages_in.labels("rounds")._value.get() == 12

    asyncio.run(run())


def test_through_the_batch_pipeline_a_waiting_batch_is_admitted_and_rated_ahead(redis_url: str) -> None:
    """The worker's own wiring: ``upcoming`` is the pipeline's ``peek``, and the next batch is still
    waiting in ``submit`` (held back by the in-flight bound) while the batch before commits."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            want, want_state = await _reference(redis_url, ex, BATCHES)
            store = new_store(redis_url)
            proc = Processor(_settings(True), store, ex)
            results: list[BatchResult] = []

            async def work(msgs: list[Message]) -> list[Awaitable[Any]]:
                fut = await proc.start(msgs, safe=True)
                results.append(await fut)
                return []

            done: list[list[Message]] = []
            pipeline: BatchPipeline[Message, int] = BatchPipeline(work, lambda tokens, msgs: done.append(msgs),
                                                                  max_inflight=1, max_merge=2)
            proc.upcoming = pipeline.peek
            for i, batch in enumerate(BATCHES):
                await pipeline.submit(batch, i)
            await pipeline.drain()
            await pipeline.stop()
            assert done == BATCHES
            assert [outputs(r) for r in results] == [outputs(r) for r in want]
            assert await pool_state(store) == want_state
            assert rated_ahead(proc.metrics, "landed") == 11
            await store.close()

    asyncio.run(run())


def test_another_writer_between_two_batches_refuses_the_step_rated_ahead(redis_url: str) -> None:
    """Right after the first batch's commit another writer rates a round of the same players; the next
    batch's first step, rated ahead from the state before that round, is refused and rated again: the
    pool ends as if the other round had come between the two batches."""
    foreign = make_round(0, size=100, seed=1)
    batches = [ROUNDS[:1], ROUNDS[1:3]]

    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            want, want_state = await _reference(redis_url, ex, [batches[0], [foreign], batches[1]])
            store = new_store(redis_url)
            other, other_proc = other_writer(redis_url, store, _settings(False), ex)

            async def write() -> None:
                await other_proc.process([foreign])

            around_commit(store, 1, write)
            proc = Processor(_settings(True), store, ex)
            got = await _in_order(proc, batches)
            assert [outputs(r) for r in got] == [outputs(want[0]), outputs(want[2])]
            assert await pool_state(store) == want_state
            assert rated_ahead(proc.metrics, "refused") == 1
            assert proc.metrics.conflicts._value.get() == 1
            await other.close()
            await store.close()

    asyncio.run(run())


def test_a_first_step_rated_ahead_of_a_commit_that_did_not_land_makes_no_dead_letter(redis_url: str) -> None:
    """The first batch's commit is refused (another writer came first), so the next batch's first step,
    rated ahead meanwhile, is dropped; it holds a round of a player whose stored belief is not a belief,
    and an invalid message: each dead letter is made, and counted, once."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            store = new_store(redis_url)
            first = make_round(0, size=50)
            bad = await poisoned_round(store, first)
            invalid = Message("rounds", 0, 2, b'{"type": "round", "pool": "h"}')
            other, other_proc = other_writer(redis_url, store, _settings(False), ex)

            async def write() -> None:
                await other_proc.process([UNRELATED_ROUND])

            around_commit(store, 1, write, before=True)
            proc = Processor(_settings(True), store, ex)
            res = await _in_order(proc, [[first], [bad, invalid]])
            assert res[0].dead == []
            assert sorted(str(d.event_id) for d in res[1].dead) == ["None", "bad"]
            assert proc.metrics.dead_letters.labels("rating")._value.get() == 1
            assert total(proc.metrics, "mmr_dead_letters") == 2
            assert proc.metrics.messages_in.labels("rounds")._value.get() == 3
            assert rated_ahead(proc.metrics, "dropped") == 1
            assert rated_ahead(proc.metrics, "landed") == 0
            await other.close()
            await store.close()

    asyncio.run(run())


def test_a_batch_other_than_the_one_planned_ahead_is_planned_again(redis_url: str) -> None:
    """The batch that comes is not the one planned ahead (a partition halted meanwhile leaves messages
    out): its plan and its steps rated ahead are dropped, nothing of them is counted, and the batch is
    rated as usual."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            invalid = Message("rounds", 0, 99, b'{"type": "round", "pool": "h"}')
            want, want_state = await _reference(redis_url, ex, [ROUNDS[:2], [*ROUNDS[2:3], invalid]])
            store = new_store(redis_url)
            proc = Processor(_settings(True), store, ex)
            proc.upcoming = lambda: [*ROUNDS[2:4], invalid]
            first = await proc.process(ROUNDS[:2])
            proc.upcoming = None
            second = await proc.process([*ROUNDS[2:3], invalid])
            assert [outputs(first), outputs(second)] == [outputs(r) for r in want]
            assert [d.offset for d in second.dead] == [99]
            assert await pool_state(store) == want_state
            # its steps rated ahead: the first, and the second if the chain got to it (``rate_ahead_depth`` 2)
            assert rated_ahead(proc.metrics, "dropped") in (1, 2)
            assert proc.metrics.messages_in.labels("rounds")._value.get() == 4
            assert total(proc.metrics, "mmr_dead_letters") == 1
            await store.close()

    asyncio.run(run())


def test_a_restart_of_redis_drops_the_steps_rated_ahead(private_redis: RedisServer) -> None:
    """A step rated ahead of a commit to a server that restarted since is never used: the rewind's
    ``settle`` and ``reset`` drop it (its ``gen`` may name another state on the restarted server), and
    the batches rated again leave what they leave without it."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            want, want_state = await _reference(private_redis.url, ex, BATCHES[:2])
            fence = ServerFence()
            store = new_store(private_redis.url, cluster=False, fence=fence)
            proc = Processor(_settings(True), store, ex)
            proc.upcoming = lambda: BATCHES[1]
            assert outputs(await proc.process(BATCHES[0])) == outputs(want[0])
            assert rated_ahead(proc.metrics, "landed") == 1  # the second step of the first batch
            private_redis.stop()
            private_redis.start()
            for _ in range(3):  # the pooled connection to the old server fails first, then the fence trips
                with contextlib.suppress(Exception):
                    await store.ping()
            assert fence.tripped
            assert await proc.settle() == 0
            # what was rated ahead of the batch taken back: its first step, and its second if the chain got to it
            assert rated_ahead(proc.metrics, "dropped") in (1, 2)
            proc.reset()
            fence.accept()
            proc.upcoming = None
            got = [await proc.process(BATCHES[0]), await proc.process(BATCHES[1])]
            assert outputs(got[1]) == outputs(want[1])
            assert await pool_state(store) == want_state
            await store.close()

    asyncio.run(run())
