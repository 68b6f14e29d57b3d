"""A commit whose reply is lost loses no output: Redis runs the commit script of an assembled round, the
connection drops before the reply reaches the worker (a TCP proxy between the worker and a real Redis
forwards the commit's transaction, then closes both sides instead of forwarding the answer, and refuses connections
for a few seconds, longer than redis-py's own retries). The retry finds the round's ids applied and must
publish the ratings that commit changed, exactly as a run without the fault does. The same holds for a
batch of round results delivered again after its commit (a crash or a rewind before its publish).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest
import redis.asyncio as aioredis
from test_round_commit import FIRST, SECOND, _msg, _outputs

from stream.service.config import Settings
from stream.service.processor import BatchResult, Processor
from stream.state.redis_store import RedisStore

pytestmark = pytest.mark.integration

DOWN_S = 3.0


class ReplyDropper:
    """A TCP proxy to Redis. Once ``armed`` with a command's bytes, the next write carrying them is forwarded
    whole, its reply is dropped and both connections closed; new connections are refused for ``DOWN_S``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.armed: bytes | None = None
        self.dropped = 0
        self.refuse_until = 0.0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self.refuse_until:
            writer.close()
            return
        up_r, up_w = await asyncio.open_connection(self.host, self.port)
        dropping = asyncio.Event()

        async def to_server() -> None:
            while data := await reader.read(1 << 16):
                if self.armed is not None and self.armed in data:
                    self.armed = None
                    self.dropped += 1
                    dropping.set()  # before the command goes: its reply must not get through
                up_w.write(data)
                await up_w.drain()

        async def to_client() -> None:
            while data := await up_r.read(1 << 16):
                if dropping.is_set():
                    self.refuse_until = time.monotonic() + DOWN_S
                    return
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(to_server()), asyncio.create_task(to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            writer.close()
            up_w.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def _run(store: RedisStore, dropper: ReplyDropper | None = None) -> list[BatchResult]:
    with ThreadPoolExecutor(1) as ex:
        proc = Processor(Settings(), store, ex)
        first = await proc.process([_msg(i, b) for i, b in enumerate(FIRST)])
        if dropper is not None:
            dropper.armed = b"\r\nEXEC\r\n"  # the end of a commit's transaction
        second = await proc.start([_msg(10 + i, b) for i, b in enumerate(SECOND)], safe=True)
        return [first, second]


def test_the_ratings_of_a_commit_whose_reply_was_lost_are_published(redis_url: str) -> None:
    async def run() -> None:
        ref = RedisStore(aioredis.Redis.from_url(redis_url), prefix=f"ref{uuid.uuid4().hex[:6]}")
        want = await _run(ref)
        assert not want[1].dead and len(want[1].outputs) == 5
        await ref.close()

        u = urlparse(redis_url)
        dropper = ReplyDropper(u.hostname or "127.0.0.1", u.port or 6379)
        port = await dropper.start()
        proxied = u._replace(netloc=f"127.0.0.1:{port}").geturl()
        store = RedisStore.from_url(proxied, prefix=f"lr{uuid.uuid4().hex[:6]}", cluster=False,
                                    socket_connect_timeout=1)
        got = await _run(store, dropper)
        assert dropper.dropped == 1
        assert [d.reason for d in got[1].dead] == []
        assert _outputs(got[1]) == _outputs(want[1])  # each player of R and S once, as without the fault
        await store.close()
        await dropper.close()

    asyncio.run(run())


def test_a_redelivered_batch_of_round_results_publishes_their_ratings_again(redis_url: str) -> None:
    """A batch of round results whose commit landed but whose outputs never reached the topic (the worker
    died, or rewound, in between) is delivered again: its results are recognised as applied, and the
    ratings of their players are published again, the same versions with the same numbers."""
    async def run() -> None:
        store = RedisStore(aioredis.Redis.from_url(redis_url), prefix=f"rd{uuid.uuid4().hex[:6]}")
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(), store, ex)
            await proc.process([_msg(i, b) for i, b in enumerate(FIRST)])
            second = [_msg(10 + i, b) for i, b in enumerate(SECOND)]
            first_time = await proc.process(second)
            again = await Processor(Settings(), store, ex).process(second)  # a new worker, after a crash
        assert not again.dead
        def by_player(res: BatchResult) -> dict[tuple[str, str], tuple[float, float, float, int]]:
            return {(o.pool, o.player): (o.rating, o.mu, o.sigma, o.version) for o in res.outputs}
        want = {k: v for k, v in by_player(first_time).items() if k in {("q", "X"), ("q", "Y"), ("p", "C")}}
        assert len(want) == 3 and by_player(again) == want
        await store.close()

    asyncio.run(run())
