"""Clients reading the worker's HTTP API as fast as they can (test_http_load.py runs it as a process of its
own): ``python http_load.py PORT POOL PLAYERS CLIENTS``. Reads a leaderboard page and a player in turn,
until its stdin closes; then prints the count of each status it got, as a JSON object."""

from __future__ import annotations

import asyncio
import sys

import orjson
from aiohttp import ClientSession, ClientTimeout, TCPConnector


async def load(port: int, pool: str, players: int, clients: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    base = f"http://127.0.0.1:{port}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    closed = loop.run_in_executor(None, sys.stdin.read)  # returns at EOF
    closed.add_done_callback(lambda _: stop.set())

    async def client(session: ClientSession, c: int) -> None:
        i = 0
        while not stop.is_set():
            path = f"/pools/{pool}/leaderboard?n=50" if i % 2 else f"/pools/{pool}/players/p{(c + i) % players}"
            async with session.get(base + path) as resp:
                await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
            i += 1

    async with ClientSession(connector=TCPConnector(limit=clients + 10), timeout=ClientTimeout(total=120)) as session:
        await asyncio.gather(*(client(session, c) for c in range(clients)))
    return statuses


if __name__ == "__main__":
    port, pool, players, clients = sys.argv[1:5]
    print(orjson.dumps(asyncio.run(load(int(port), pool, int(players), int(clients))),
                       option=orjson.OPT_NON_STR_KEYS).decode())
