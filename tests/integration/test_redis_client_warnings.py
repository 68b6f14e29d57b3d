"""The service's Redis clients are built the asyncio way: redis-py's asyncio clients get its asyncio
``Retry`` (given the blocking one, redis-py >= 8.2 converts it and warns "A synchronous
redis.retry.Retry was passed to an asyncio client" on every connection), and talking to a real
Redis through them warns about nothing."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import redis
import redis.asyncio.retry

from stream.state.redis_client import connect, connect_blocking

pytestmark = pytest.mark.integration


def test_the_asyncio_client_gets_the_asyncio_retry_and_warns_nothing(redis_url: str) -> None:
    async def main() -> None:
        client = connect(redis_url, cluster=None)  # as the worker: asks the server what it is
        assert isinstance(client, redis.asyncio.Redis)  # the test server is a single one
        try:
            assert isinstance(client.get_retry(), redis.asyncio.retry.Retry), type(client.get_retry())
            await client.set("mmr:test:retry", b"1")
            assert await client.get("mmr:test:retry") == b"1"
            async with client.pipeline(transaction=True) as pipe:
                pipe.incr("mmr:test:retry")
                pipe.delete("mmr:test:retry")
                assert await pipe.execute() == [2, 1]
        finally:
            await client.aclose()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        asyncio.run(main())


def test_the_blocking_client_keeps_the_blocking_retry(redis_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client = connect_blocking(redis_url, cluster=False)
        assert isinstance(client, redis.Redis)
        try:
            assert isinstance(client.get_retry(), redis.retry.Retry)
            assert client.ping()
        finally:
            client.close()
