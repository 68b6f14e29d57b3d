"""Batch delivery (stream.service.delivery): a real Faust app and channel, no broker.

Faust's consumer would call ``on_message`` for each fetched record; here the tests do, with
Faust's own ``Message`` objects, and read the batches from the channel as the agent does.
The worker on a real broker is covered by tests/integration/test_service.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from conftest import in_loop
from faust.types.tuples import Message as FaustMessage

from stream.service.delivery import BatchDelivery


def make(max_batch: int = 3, within: float = 0.01, queue_batches: int = 1,
         max_batch_bytes: int = 0) -> tuple[Any, BatchDelivery, Any, list[Any]]:
    """An app (not started), the delivery installed on it, the agent's side of the channel,
    and what reached Faust's own per-record callback."""
    app = faust.App(f"test-delivery-{id(object())}", broker="kafka://127.0.0.1:1", store="memory://")
    app.flow_control.resume()
    faust_saw: list[Any] = []

    async def faust_on_message(message: Any) -> None:
        faust_saw.append(message)

    app.topics.on_message = faust_on_message
    d = BatchDelivery(app, {"in-a", "in-b"}, max_batch=max_batch, within=within, queue_batches=queue_batches,
                      max_batch_bytes=max_batch_bytes)
    d.install()
    return app, d, aiter(d.channel), faust_saw


def record(topic: str, offset: int, generation_id: int = 0, value: bytes | None = None) -> Any:
    value = b"v%d" % offset if value is None else value
    return FaustMessage(topic, 0, offset, 1.0, 0, [], b"k", value, None, generation_id=generation_id)


def offsets(batch: list[Any]) -> list[tuple[str, int]]:
    return [(m.topic, m.offset) for m in batch]


async def take(d: BatchDelivery, agent_side: Any) -> list[Any]:
    """What the worker's agent does with each batch: take it, keep the current records."""
    return d.current(await asyncio.wait_for(agent_side.__anext__(), 2.0))


@in_loop
async def test_records_arrive_in_order_in_batches_of_at_most_max_batch() -> None:
    _app, d, agent_side, faust_saw = make(max_batch=3, within=10.0, queue_batches=4)  # size closes them
    for i in range(7):
        await d.on_message(record("in-a" if i % 2 else "in-b", i))
    first, second = await take(d, agent_side), await take(d, agent_side)
    assert offsets(first) == [("in-b", 0), ("in-a", 1), ("in-b", 2)]
    assert offsets(second) == [("in-a", 3), ("in-b", 4), ("in-a", 5)]
    await d.flush()  # the rest (the timer's job)
    assert offsets(await take(d, agent_side)) == [("in-b", 6)]
    assert faust_saw == [] and d.batches == 3


@in_loop
async def test_the_timer_closes_a_batch_within_its_window() -> None:
    _app, d, agent_side, _ = make(max_batch=1000, within=0.02)
    timer = asyncio.create_task(d.run_timer())
    try:
        t0 = asyncio.get_running_loop().time()
        await d.on_message(record("in-a", 0))
        await d.on_message(record("in-a", 1))
        batch = await take(d, agent_side)
        waited = asyncio.get_running_loop().time() - t0
        assert offsets(batch) == [("in-a", 0), ("in-a", 1)]
        assert waited >= 0.02  # the window was waited, not skipped
        await d.on_message(record("in-a", 2))  # the next batch opens a new window
        assert offsets(await take(d, agent_side)) == [("in-a", 2)]
    finally:
        timer.cancel()


@in_loop
async def test_other_topics_go_through_faust() -> None:
    _app, d, _agent_side, faust_saw = make()
    other = record("somewhere-else", 5)
    await d.on_message(other)
    assert faust_saw == [other] and d.open_records == 0


@in_loop
async def test_a_full_channel_holds_the_fetch_loop_back_and_loses_nothing() -> None:
    _app, d, agent_side, _ = make(max_batch=2, within=10.0, queue_batches=1)

    async def fetch_loop() -> None:  # Faust's drain loop awaits each callback in turn
        for i in range(8):
            await d.on_message(record("in-a", i))

    feeding = asyncio.create_task(fetch_loop())
    await asyncio.sleep(0.05)
    assert not feeding.done()  # one batch queued, one waiting to be put: the loop waits
    got: list[tuple[str, int]] = []
    while len(got) < 8:
        got += offsets(await take(d, agent_side))
    await feeding
    assert got == [("in-a", i) for i in range(8)]


@in_loop
async def test_revocation_drops_the_open_batch_and_stale_records() -> None:
    app, d, agent_side, _ = make(max_batch=100, within=10.0)
    await d.on_message(record("in-a", 0))
    d.clear()  # partitions revoked: Faust fetches these again from the committed offset
    assert d.open_records == 0 and d.dropped == 1
    await d.on_message(record("in-a", 1))
    await d.flush()
    assert offsets(await take(d, agent_side)) == [("in-a", 1)]  # the cleared record is not in it

    gen = app.consumer_generation_id
    batch = [record("in-a", 2, generation_id=gen), record("in-a", 3, generation_id=gen + 1)]
    assert offsets(d.current(batch)) == [("in-a", 2)]  # fetched before the last rebalance: dropped
    app.flow_control.suspend()
    assert d.current(batch) == []  # a rebalance is under way: nothing is handed on
    assert d.dropped == 4


@in_loop
async def test_on_message_waits_while_the_flow_is_suspended() -> None:
    app, d, agent_side, _ = make(max_batch=10, within=10.0)
    app.flow_control.suspend()
    waiting = asyncio.create_task(d.on_message(record("in-a", 0)))
    await asyncio.sleep(0.02)
    assert not waiting.done() and d.open_records == 0  # not even in the open batch
    app.flow_control.resume()
    await asyncio.wait_for(waiting, 2.0)
    await d.flush()
    assert offsets(await take(d, agent_side)) == [("in-a", 0)]


@in_loop
async def test_while_the_agent_is_behind_the_open_batch_grows_instead_of_queueing() -> None:
    """One batch waits for the agent; records arriving meanwhile join the *next* batch, which
    closes only when the agent took the waiting one (as Faust's take_events hands over all it
    buffered), not once per window: the pipeline then rates one big batch, not many small."""
    _app, d, agent_side, _ = make(max_batch=1000, within=0.005, queue_batches=1)
    timer = asyncio.create_task(d.run_timer())
    try:
        await d.on_message(record("in-a", 0))
        await asyncio.sleep(0.03)  # the window closed: batch [0] waits on the channel
        for i in range(1, 6):  # the agent is busy for several windows
            await d.on_message(record("in-a", i))
            await asyncio.sleep(0.01)
        assert d.batches == 1 and d.open_records == 5
        assert offsets(await take(d, agent_side)) == [("in-a", 0)]
        assert offsets(await take(d, agent_side)) == [("in-a", i) for i in range(1, 6)]  # one batch
    finally:
        timer.cancel()


@in_loop
async def test_while_the_agent_works_on_a_batch_the_timer_leaves_the_open_batch_growing() -> None:
    """The timer closes no batch while the agent works on one (it would only wait, cut small, and
    be a step of its own); once the agent is idle, everything that arrived meanwhile is one batch,
    closed at once. A batch the agent takes before the timer runs makes the timer wait again."""
    _app, d, agent_side, _ = make(max_batch=1000, within=0.005, queue_batches=1)
    timer = asyncio.create_task(d.run_timer())
    try:
        d.agent_busy()
        for i in range(5):  # several windows while the agent works
            await d.on_message(record("in-a", i))
            await asyncio.sleep(0.01)
        assert d.batches == 0 and d.open_records == 5
        d.agent_idle()
        d.agent_busy()  # took another batch before the timer ran: still nothing closed
        await asyncio.sleep(0.02)
        assert d.batches == 0
        d.agent_idle()
        assert offsets(await take(d, agent_side)) == [("in-a", i) for i in range(5)]
        await d.on_message(record("in-a", 5))  # an idle agent: closed within the window, as before
        assert offsets(await take(d, agent_side)) == [("in-a", 5)]
    finally:
        timer.cancel()


@in_loop
async def test_while_the_agent_is_behind_the_open_batch_grows_only_to_its_byte_bound() -> None:
    """Large messages (rounds of thousands of players) must not pile up by the thousand while the
    agent is busy: the open batch closes at ``max_batch_bytes`` and the fetch loop then waits, as it
    waits at ``max_batch`` messages, so the worker holds a bounded number of bytes however large
    the messages are."""
    _app, d, agent_side, _ = make(max_batch=1000, within=10.0, queue_batches=1, max_batch_bytes=250)

    async def fetch_loop() -> None:
        for i in range(10):
            await d.on_message(record("in-a", i, value=bytes(100)))

    feeding = asyncio.create_task(fetch_loop())
    await asyncio.sleep(0.05)
    assert not feeding.done()  # one batch of 300 bytes queued, the next full: the loop waits
    assert d.batches == 1 and d.open_records == 3
    sizes: list[int] = []
    while sum(sizes) < 10:
        sizes.append(len(await take(d, agent_side)))
        if sum(sizes) == 9:
            await d.flush()  # the last record's batch (the timer's job)
    await feeding
    assert sizes == [3, 3, 3, 1]


@in_loop
async def test_the_consumer_faust_builds_calls_the_installed_delivery() -> None:
    """Faust hands its consumer ``app.topics.on_message`` when it builds it (lazily, when the app
    starts); ``install`` replaces that attribute first. An upgrade that binds the callback
    elsewhere fails here instead of bypassing the batches."""
    app, d, _agent_side, _faust_saw = make()
    assert app.consumer.callback == d.on_message
