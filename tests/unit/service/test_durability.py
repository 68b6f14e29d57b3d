"""Durability (stream/service/durability.py): held batches are acknowledged in order, only after the
store answered a ping taken at least ``after_s`` after they were held; none while it fails."""

from __future__ import annotations

import asyncio

from stream.service.durability import Durability
from stream.state.redis_client import StoreUnavailable


class Store:
    def __init__(self) -> None:
        self.up = True

    async def ping(self) -> None:
        if not self.up:
            raise StoreUnavailable("down")


def test_held_batches_are_acked_in_order_once_old_enough_and_the_server_answers() -> None:
    async def scenario() -> None:
        acked: list[str] = []
        store = Store()
        d: Durability[str, int] = Durability(0.05, acked.extend, store.ping)
        d.hold(["a"], [1])
        d.hold(["b"], [2, 3])
        assert await d.tick() == 0 and acked == []  # too recent
        await asyncio.sleep(0.06)
        store.up = False
        assert await d.tick() == 0 and acked == []  # old enough, but nothing proves the server kept them
        store.up = True
        d.hold(["c"], [4])
        assert await d.tick() == 2 and acked == ["a", "b"]
        assert d.held_messages == 1
        assert d.take() == [(["c"], [4])] and d.held_messages == 0

    asyncio.run(scenario())


def test_no_delay_acks_at_once() -> None:
    async def scenario() -> None:
        acked: list[str] = []
        d: Durability[str, int] = Durability(0.0, acked.extend, Store().ping)
        d.hold(["a"], [1])
        assert acked == ["a"] and d.take() == []

    asyncio.run(scenario())
