"""BatchPipeline (stream/service/pipeline.py): order, ack-after-delivery, merging, back-pressure, drain, errors, stop.

Pure asyncio (no broker, no Redis): ``work`` returns futures the test controls, ``done``
records what it was called with. Every scenario runs under ``asyncio.wait_for`` so a hang
fails the test instead of blocking the suite.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.service.pipeline import BatchPipeline

pytestmark = pytest.mark.timeout(10)  # backstop; each scenario has its own 4 s asyncio timeout

TIMEOUT = 4.0


def run(coro_fn: Callable[[], Coroutine[Any, Any, None]], timeout: float = TIMEOUT) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro_fn(), timeout)

    asyncio.run(main())


async def spin(n: int = 50) -> None:
    """Let every ready task run for a while (no wall-clock time involved)."""
    for _ in range(n):
        await asyncio.sleep(0)


class Failures:
    """An ``on_error`` that keeps each error it is given (``errors``) and sets ``failed``."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.failed = asyncio.Event()

    async def __call__(self, exc: BaseException) -> None:
        self.errors.append(exc)
        self.failed.set()


class Recorder:
    """``work``/``done`` pair whose delivery futures are resolved by the test (or automatically)."""

    def __init__(self, *, futs_per_call: int = 1, auto: bool = False, rng: random.Random | None = None) -> None:
        self.work_calls: list[list[int]] = []
        self.futs: list[list[asyncio.Future[None]]] = []  # per work call
        self.done_calls: list[tuple[list[str], list[int]]] = []
        self.futs_per_call = futs_per_call
        self.auto = auto
        self.rng = rng
        self.violations: list[str] = []
        self._bg: set[asyncio.Task[None]] = set()
        self.gate: asyncio.Event | None = None  # when set: work waits for it before returning
        self.entered = asyncio.Event()

    def open_gate(self) -> None:
        """Let ``work``, blocked on ``gate``, return."""
        assert self.gate is not None
        self.gate.set()

    async def work(self, msgs: list[int]) -> list[asyncio.Future[None]]:
        self.work_calls.append(list(msgs))
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.rng is not None:
            await spin(self.rng.randrange(3))
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[None]] = [loop.create_future() for _ in range(self.futs_per_call)]
        self.futs.append(futs)
        if self.auto:
            for f in futs:
                t = asyncio.create_task(self._resolve_later(f, self.rng.randrange(6) if self.rng else 0))
                self._bg.add(t)
                t.add_done_callback(self._bg.discard)
        return futs

    @staticmethod
    async def _resolve_later(f: asyncio.Future[None], ticks: int) -> None:
        await spin(ticks)
        f.set_result(None)

    def done(self, tokens: list[str], msgs: list[int]) -> None:
        # the ack stage may only call done once every future of those batches resolved
        idx = len(self.done_calls)
        if idx < len(self.futs) and not all(f.done() for f in self.futs[idx]):
            self.violations.append(f"done({tokens}) before its futures resolved")
        self.done_calls.append((list(tokens), list(msgs)))

    @property
    def done_tokens(self) -> list[str]:
        return [t for toks, _ in self.done_calls for t in toks]


# --------------------------------------------------------------------------- (1) order


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40),
       max_merge=st.integers(min_value=1, max_value=30),
       max_inflight=st.integers(min_value=1, max_value=60),
       futs_per_call=st.integers(min_value=0, max_value=3),
       seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_order_and_exactly_once(sizes: list[int], max_merge: int, max_inflight: int, futs_per_call: int,
                                seed: int) -> None:
    rng = random.Random(seed)
    batches: list[list[int]] = []
    n = 0
    for s in sizes:
        batches.append(list(range(n, n + s)))
        n += s
    tokens = [f"t{i}" for i in range(len(batches))]
    batch_of = dict(zip(tokens, batches, strict=True))

    async def scenario() -> None:
        rec = Recorder(futs_per_call=futs_per_call, auto=True, rng=rng)
        waits: list[float] = []
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_inflight=max_inflight,
                                                   max_merge=max_merge, on_queued=waits.append)
        for b, t in zip(batches, tokens, strict=True):
            await p.submit(b, t)
            if rng.random() < 0.3:
                await spin(rng.randrange(4))
        await p.drain()
        assert p.inflight == 0
        await p.stop()

        # work saw every message exactly once, in submission order
        assert [m for call in rec.work_calls for m in call] == list(range(n))
        # done saw every token exactly once, in submission order
        assert rec.done_tokens == tokens
        assert rec.violations == []
        # each done call: its msgs are exactly the concatenation of its tokens' batches,
        # and it corresponds one-to-one to a work call (same messages)
        assert len(rec.done_calls) == len(rec.work_calls)
        for (toks, msgs), work_msgs in zip(rec.done_calls, rec.work_calls, strict=True):
            assert msgs == [m for t in toks for m in batch_of[t]]
            assert msgs == work_msgs
            # merging never goes more than one batch beyond max_merge
            assert sum(len(batch_of[t]) for t in toks[:-1]) < max_merge or len(toks) == 1
        assert p.merged_batches == len(tokens) - len(rec.done_calls)
        # the queue wait (mmr_stage_seconds{stage="queued"}): once per work call, of its oldest batch
        assert len(waits) == len(rec.work_calls) and all(w >= 0 for w in waits)

    run(scenario, timeout=2.0)  # a hang fails fast, even while hypothesis shrinks


# ------------------------------------------------------------ (2) done only after delivery


def test_done_waits_for_all_futures_and_keeps_order_when_later_batch_resolves_first() -> None:
    async def scenario() -> None:
        rec = Recorder(futs_per_call=2)
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_merge=1)  # no merging
        await p.submit([0, 1], "a")
        await p.submit([2], "b")
        await p.submit([3, 4, 5], "c")
        await spin()
        assert rec.work_calls == [[0, 1], [2], [3, 4, 5]]  # rate runs ahead of the acks
        assert rec.done_calls == []

        # the later batches are fully delivered first: nothing may be acked yet
        for f in rec.futs[2] + rec.futs[1]:
            f.set_result(None)
        await spin()
        assert rec.done_calls == []

        # batch a half delivered: still nothing
        rec.futs[0][1].set_result(None)
        await spin()
        assert rec.done_calls == []
        assert p.inflight == 6

        rec.futs[0][0].set_result(None)
        await spin()
        assert rec.done_tokens == ["a", "b", "c"]
        assert rec.done_calls == [(["a"], [0, 1]), (["b"], [2]), (["c"], [3, 4, 5])]
        assert rec.violations == []
        assert p.inflight == 0
        await p.stop()

    run(scenario)


def test_done_with_futures_resolving_after_real_delays_in_reverse_order() -> None:
    async def scenario() -> None:
        resolved: list[int] = []
        order: list[tuple[str, bool]] = []
        k = 0

        async def work(msgs: list[int]) -> list[Awaitable[None]]:
            nonlocal k
            out: list[Awaitable[None]] = []
            for _ in range(3):
                j = k
                k += 1

                async def deliver(j: int = j) -> None:
                    await asyncio.sleep(0.002 * (20 - j))  # later futures resolve earlier
                    resolved.append(j)

                out.append(deliver())
            return out

        def done(tokens: list[str], msgs: list[int]) -> None:
            i = int(tokens[0])
            # all 3 futures of this batch (and of every earlier batch) resolved
            order.append((tokens[0], set(range(3 * (i + 1))) <= set(resolved)))

        p: BatchPipeline[int, str] = BatchPipeline(work, done, max_merge=1)
        for i in range(5):
            await p.submit([i], str(i))
        await p.drain()
        assert [t for t, _ in order] == ["0", "1", "2", "3", "4"]
        assert all(ok for _, ok in order), order
        assert sorted(resolved) == list(range(15)) and resolved != sorted(resolved)  # really out of order
        await p.stop()

    run(scenario)


async def blocked_on_first(first: list[int], token: str, **kw: Any) -> tuple[Recorder, BatchPipeline[int, str]]:
    """A pipeline whose rate stage is inside ``work`` on ``first`` and blocked there
    (``rec.gate`` not set yet): what is submitted next queues up, to be merged when it opens."""
    rec = Recorder(auto=True)
    rec.gate = asyncio.Event()
    p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, **kw)
    await p.submit(first, token)
    await asyncio.wait_for(rec.entered.wait(), 1)
    return rec, p


# --------------------------------------------------------------------------- (3) merging


def test_batches_queued_while_work_is_blocked_are_merged_in_order() -> None:
    async def scenario() -> None:
        rec, p = await blocked_on_first([0, 1], "A", max_merge=5)
        b = [2, 3]
        await p.submit(b, "B")
        await p.submit([4, 5, 6], "C")
        await p.submit([7], "D")
        await p.submit([8], "E")
        await spin()
        assert rec.work_calls == [[0, 1]]  # blocked
        rec.open_gate()
        await p.drain()
        # B (2) < 5 -> takes C (5) -> stop; then D (1) < 5 -> takes E; queue empty
        assert rec.work_calls == [[0, 1], [2, 3, 4, 5, 6], [7, 8]]
        assert [toks for toks, _ in rec.done_calls] == [["A"], ["B", "C"], ["D", "E"]]
        assert [msgs for _, msgs in rec.done_calls] == rec.work_calls
        assert p.merged_batches == 2
        assert b == [2, 3]  # the caller's list is not mutated by merging
        await p.stop()

    run(scenario)


def test_merge_stops_at_max_merge_and_never_takes_more_than_one_extra_batch() -> None:
    async def scenario() -> None:
        rec, p = await blocked_on_first([0], "first", max_merge=4)
        await p.submit(list(range(1, 7)), "big")  # 6 >= max_merge: goes alone
        for i in range(7, 17):  # ten singles: 4 + 4 + 2
            await p.submit([i], f"s{i}")
        await p.submit([17, 18, 19], "x")  # lands after s15, s16 (2 < 4) -> 5 messages
        rec.open_gate()
        await p.drain()
        assert rec.work_calls == [[0], list(range(1, 7)), [7, 8, 9, 10], [11, 12, 13, 14], [15, 16, 17, 18, 19]]
        assert all(len(c) <= 4 + 3 for c in rec.work_calls)
        assert rec.done_tokens == ["first", "big"] + [f"s{i}" for i in range(7, 17)] + ["x"]
        await p.stop()

    run(scenario)


def test_merge_also_stops_at_max_merge_bytes() -> None:
    """Message sizes (here: the int itself) bound a merge too, so one merged batch stays small."""
    async def scenario() -> None:
        rec, p = await blocked_on_first([0], "first", max_merge=100, max_merge_bytes=10, size=lambda m: m)
        for i, batch in enumerate(([4], [5], [3], [9], [1], [1], [20], [2])):
            await p.submit(batch, f"b{i}")
        rec.open_gate()
        await p.drain()
        # 4+5=9 <10 takes 3 -> 12; 9 alone reaches 9 <10 takes 1 -> 10; 1+20 -> 21; 2
        assert rec.work_calls == [[0], [4, 5, 3], [9, 1], [1, 20], [2]]
        assert rec.done_tokens == ["first"] + [f"b{i}" for i in range(8)]
        await p.stop()

    run(scenario)


# ----------------------------------------------------------------------- (4) back-pressure


def test_submit_blocks_at_max_inflight_and_resumes_after_done() -> None:
    async def scenario() -> None:
        rec = Recorder()
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_inflight=10, max_merge=1)
        await asyncio.wait_for(p.submit(list(range(6)), "a"), 1)
        assert p.inflight == 6
        await asyncio.wait_for(p.submit(list(range(6, 10)), "b"), 1)  # 6 < 10: admitted
        assert p.inflight == 10
        blocked = asyncio.create_task(p.submit([10], "c"))
        await spin()
        assert not blocked.done()  # 10 in flight: waits
        assert p.inflight == 10
        await spin()
        assert rec.work_calls == [list(range(6)), list(range(6, 10))]  # c not queued yet

        rec.futs[0][0].set_result(None)  # a delivered -> done(a) -> 4 in flight
        await asyncio.wait_for(blocked, 1)
        assert rec.done_tokens == ["a"]
        assert p.inflight == 5
        await spin()
        assert rec.work_calls[-1] == [10]

        for fs in rec.futs[1:]:
            for f in fs:
                f.set_result(None)
        await asyncio.wait_for(p.drain(), 1)
        assert p.inflight == 0
        assert rec.done_tokens == ["a", "b", "c"]
        await p.stop()

    run(scenario)


def test_submit_also_blocks_at_max_inflight_bytes_but_admits_anything_when_idle() -> None:
    """The byte bound (``size`` of each message, here the int itself) holds back a batch while
    enough bytes are in flight; a batch larger than the bound still goes when nothing is in flight."""
    async def scenario() -> None:
        rec = Recorder()
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_inflight=100, max_merge=1,
                                                   max_inflight_bytes=10, size=lambda m: m)
        await asyncio.wait_for(p.submit([50], "huge"), 1)  # nothing in flight: admitted
        blocked = asyncio.create_task(p.submit([1], "a"))
        await spin()
        assert not blocked.done() and p.inflight == 1
        rec.futs[0][0].set_result(None)
        await asyncio.wait_for(blocked, 1)
        await asyncio.wait_for(p.submit([4], "b"), 1)  # 1 + 4 bytes < 10
        await asyncio.wait_for(p.submit([5], "c"), 1)  # 5 < 10: admitted, now 10
        blocked = asyncio.create_task(p.submit([1], "d"))
        await spin()
        assert not blocked.done() and p.inflight == 3
        rec.futs[1][0].set_result(None)  # a done: 9 bytes in flight
        await asyncio.wait_for(blocked, 1)
        for fs in rec.futs[2:]:
            for f in fs:
                f.set_result(None)
        await spin()
        for fs in rec.futs[2:]:
            for f in fs:
                if not f.done():
                    f.set_result(None)
        await asyncio.wait_for(p.drain(), 1)
        assert p.inflight == 0 and p.inflight_bytes == 0
        assert rec.done_tokens == ["huge", "a", "b", "c", "d"]
        await p.stop()

    run(scenario)


def test_inflight_is_zero_after_drain_with_backpressure_under_load() -> None:
    async def scenario() -> None:
        rec = Recorder(auto=True, rng=random.Random(3), futs_per_call=2)
        seen_max = 0
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_inflight=10, max_merge=7)
        for i in range(200):
            await p.submit([i, i + 1000], str(i))
            seen_max = max(seen_max, p.inflight)
        await p.drain()
        assert p.inflight == 0
        assert seen_max <= 10 + 1  # admitted only while < 10 in flight, then +2
        assert rec.done_tokens == [str(i) for i in range(200)]
        await p.stop()

    run(scenario)


# ------------------------------------------------------------------------------- (5) drain


def test_drain_returns_only_after_every_submitted_batch_is_done() -> None:
    async def scenario() -> None:
        rec = Recorder()
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_merge=1)
        await asyncio.wait_for(p.drain(), 1)  # nothing submitted: immediate
        for i in range(4):
            await p.submit([i], str(i))
        drain = asyncio.create_task(p.drain())
        await spin()
        for k in range(4):
            assert not drain.done()
            rec.futs[k][0].set_result(None)
            await spin()
        await asyncio.wait_for(drain, 1)
        assert rec.done_tokens == ["0", "1", "2", "3"]
        assert p.inflight == 0
        await p.stop()

    run(scenario)


def test_drain_waits_for_a_batch_still_inside_work() -> None:
    async def scenario() -> None:
        rec = Recorder(auto=True)
        rec.gate = asyncio.Event()
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done)
        await p.submit([1, 2], "a")
        await p.submit([3], "b")
        drain = asyncio.create_task(p.drain())
        await spin()
        assert not drain.done()
        rec.open_gate()
        await asyncio.wait_for(drain, 1)
        assert rec.done_tokens == ["a", "b"]
        await p.stop()

    run(scenario)


# ------------------------------------------------------------------------------ (6) errors


def test_exception_in_work_calls_on_error_and_stops_acking() -> None:
    async def scenario() -> None:
        boom = RuntimeError("work failed")
        fails = Failures()
        rec = Recorder(auto=True)

        async def work(msgs: list[int]) -> list[asyncio.Future[None]]:
            if 2 in msgs:
                rec.work_calls.append(list(msgs))
                raise boom
            return await rec.work(msgs)

        p: BatchPipeline[int, str] = BatchPipeline(work, rec.done, max_merge=1, on_error=fails)
        for i in range(5):
            await p.submit([i], str(i))
        await asyncio.wait_for(fails.failed.wait(), 1)
        await spin(100)
        assert fails.errors == [boom]
        assert rec.done_tokens == ["0", "1"]  # the batches before the failure are still acked
        assert rec.work_calls == [[0], [1], [2]]  # the rate stage stopped at the failure
        assert p.inflight == 3
        await p.stop()
        assert rec.done_tokens == ["0", "1"]

    run(scenario)


def test_failed_delivery_future_calls_on_error_and_nothing_later_is_acked() -> None:
    async def scenario() -> None:
        boom = ConnectionError("broker said no")
        fails = Failures()
        rec = Recorder(futs_per_call=2)
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_merge=1, on_error=fails)
        for i in range(4):
            await p.submit([i], str(i))
        await spin()
        assert len(rec.futs) == 4
        for f in rec.futs[0]:
            f.set_result(None)
        rec.futs[1][0].set_result(None)
        rec.futs[1][1].set_exception(boom)
        for fs in rec.futs[2:]:  # later batches are delivered fine
            for f in fs:
                f.set_result(None)
        await asyncio.wait_for(fails.failed.wait(), 1)
        await spin(100)
        assert fails.errors == [boom]
        assert rec.done_tokens == ["0"]
        await p.stop()
        assert rec.done_tokens == ["0"]

    run(scenario)


def test_exception_in_done_calls_on_error() -> None:
    async def scenario() -> None:
        boom = ValueError("ack failed")
        fails = Failures()
        acked: list[list[str]] = []

        async def work(msgs: list[int]) -> list[Awaitable[Any]]:
            return []

        def done(tokens: list[str], msgs: list[int]) -> None:
            acked.append(tokens)
            if tokens == ["1"]:
                raise boom

        p: BatchPipeline[int, str] = BatchPipeline(work, done, max_merge=1, on_error=fails)
        await p.submit([0], "0")
        await spin()
        await p.submit([1], "1")
        await asyncio.wait_for(fails.failed.wait(), 1)
        with pytest.raises(RuntimeError, match="pipeline failed"):  # no more input once acks stopped
            await p.submit([2], "2")
        await spin(100)
        assert fails.errors == [boom]
        assert acked == [["0"], ["1"]]
        await p.stop()

    run(scenario)


def test_cancelled_delivery_future_calls_on_error() -> None:
    async def scenario() -> None:
        fails = Failures()
        rec = Recorder()
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, on_error=fails)
        await p.submit([1], "a")
        await spin()
        rec.futs[0][0].cancel()  # e.g. the producer dropped its pending sends
        await spin(100)
        await p.stop()
        assert rec.done_tokens == []
        assert len(fails.errors) == 1, "the ack stage died without on_error"

    run(scenario)


def test_drain_does_not_hang_after_a_stage_failure() -> None:
    async def scenario() -> None:
        async def work(msgs: list[int]) -> list[Awaitable[Any]]:
            raise RuntimeError("work failed")

        p: BatchPipeline[int, str] = BatchPipeline(work, lambda t, m: None, on_error=Failures())
        await p.submit([1], "a")
        await spin()
        try:
            await asyncio.wait_for(p.drain(), 0.5)
        except RuntimeError:
            pass  # raising the stage's error would be fine too
        finally:
            await p.stop()

    run(scenario)


def test_drain_waits_for_an_empty_batch_too() -> None:
    async def scenario() -> None:
        rec = Recorder(auto=True)
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done)
        await p.submit([], "empty")
        await p.drain()
        try:
            assert rec.done_tokens == ["empty"]
        finally:
            await spin()  # (let the stages start, so stop() does not leave their coroutines un-awaited)
            await p.stop()

    run(scenario)


# -------------------------------------------------------------------------------- (7) stop


def test_stop_cancels_both_stages_cleanly() -> None:
    async def scenario() -> None:
        fails = Failures()
        rec = Recorder(futs_per_call=1)
        p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_merge=1, on_error=fails)
        before = asyncio.all_tasks()
        await p.stop()  # never started: no-op
        await p.submit([0], "a")  # ack stage will wait on a's future
        await spin()
        rec.gate = asyncio.Event()  # the rate stage blocks inside work for b
        rec.entered.clear()
        await p.submit([1], "b")
        await asyncio.wait_for(rec.entered.wait(), 1)
        tasks = asyncio.all_tasks() - before  # the pipeline's two stages
        assert len(tasks) == 2 and not any(t.done() for t in tasks)

        await asyncio.wait_for(p.stop(), 1)
        assert all(t.cancelled() for t in tasks)
        assert not asyncio.all_tasks() - before  # no task of the pipeline left
        assert fails.errors == []  # cancellation is not a failure
        # (stop() cancels the ack task inside asyncio.gather, which cancels the pending delivery
        # futures themselves; resolve them only if they are still pending)
        if not rec.futs[0][0].done():
            rec.futs[0][0].set_result(None)
        rec.open_gate()
        await spin()
        assert rec.done_calls == []  # nothing runs after stop
        assert rec.work_calls == [[0], [1]]
        await p.stop()  # idempotent

    run(scenario)


def test_stop_after_a_stage_failure_does_not_raise() -> None:
    async def scenario() -> None:
        fails = Failures()

        async def work(msgs: list[int]) -> list[Awaitable[Any]]:
            raise RuntimeError("work failed")

        p: BatchPipeline[int, str] = BatchPipeline(work, lambda t, m: None, on_error=fails)
        before = asyncio.all_tasks()
        await p.submit([1], "a")
        await asyncio.wait_for(fails.failed.wait(), 1)
        await spin()
        await asyncio.wait_for(p.stop(), 1)
        assert not asyncio.all_tasks() - before  # no task of the pipeline left

    run(scenario)


# --------------------------------------------------------------------------- reset / resume (a rewind)


async def two_rated_not_delivered() -> tuple[Recorder, BatchPipeline[int, str]]:
    """A pipeline that rated batch a ([0]) and then batch b ([1]), neither's outputs delivered yet (their
    futures, ``rec.futs``, are the test's to resolve)."""
    rec = Recorder()
    p: BatchPipeline[int, str] = BatchPipeline(rec.work, rec.done, max_inflight=100, max_merge=1)
    await p.submit([0], "a")
    await p.submit([1], "b")
    await spin()
    return rec, p


def test_reset_gives_back_every_batch_not_done_in_order_and_resume_rates_them_first() -> None:
    async def scenario() -> None:
        rec, p = await two_rated_not_delivered()
        rec.futs[0][0].set_result(None)  # a: done; b: its outputs not delivered
        await spin()
        rec.gate = asyncio.Event()
        await p.submit([2], "c")  # in the rate stage
        await p.submit([3], "d")  # queued
        await spin()
        resetting = asyncio.create_task(p.reset())
        await spin()
        assert not resetting.done()  # b's outputs are still on their way: they go out first
        rec.futs[1][0].set_result(None)
        batches = await resetting
        assert batches == [([1], ["b"]), ([2], ["c"]), ([3], ["d"])]
        late = asyncio.create_task(p.submit([4], "e"))
        await spin()
        assert not late.done()  # paused until resume: nothing gets ahead of the batches given back
        rec.gate, rec.auto = None, True
        await p.resume(batches)
        await late
        await p.drain()
        assert rec.done_tokens == ["a", "b", "c", "d", "e"]
        assert p.inflight == 0
        await p.stop()

    run(scenario)


def test_a_batch_submitted_while_reset_waits_for_deliveries_is_rated_after_the_batches_given_back() -> None:
    """``reset`` waits for the outputs of batches already rated; the consumer keeps taking meanwhile. A
    batch it submits then must wait for ``resume`` and be rated after the batches ``reset`` gave back: rated
    before them, it would apply newer events on top of a restarted Redis that lacks older ones (a round
    assembled from results in another order, matches applied out of order)."""
    async def scenario() -> None:
        rec, p = await two_rated_not_delivered()
        assert rec.work_calls == [[0], [1]]  # both rated; neither's outputs delivered
        resetting = asyncio.create_task(p.reset())
        await spin()
        assert not resetting.done()  # waiting for a's and b's outputs
        late = asyncio.create_task(p.submit([2], "c"))  # taken by the consumer meanwhile
        await spin()
        assert not late.done()  # paused from the start of the reset
        for f in rec.futs:
            f[0].set_result(None)
        batches = await resetting
        assert batches == [([0], ["a"]), ([1], ["b"])]
        rec.auto = True
        await p.resume(batches)
        await late
        await p.drain()
        assert rec.work_calls == [[0], [1], [0], [1], [2]]  # the late batch after the batches given back
        assert rec.done_tokens == ["a", "b", "c"]
        assert p.inflight == 0
        await p.stop()

    run(scenario)
