"""Example game server: plays games between simulated players and publishes each result.

Each player has a hidden skill; a game's winner is drawn from the logistic of the skill gap,
so the ratings the worker publishes should sort the players by skill after a few hundred
games. Results go out through ``stream.client.Publisher`` (what a real game server imports:
no numba, no Faust), one ``match`` event per game, keyed by the pool.

    KAFKA_BOOTSTRAP_SERVERS=localhost:9094 python examples/game_server.py --pool arena --games 500

Against ``docker compose up`` the broker is published on localhost:9094 (docker-compose.yml).
Ctrl-C stops it after flushing what was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import signal
import time

from stream.client import Publisher


def play(rng: random.Random, skills: dict[str, float]) -> tuple[str, str, float]:
    """Two distinct players and A's score: 1 win, 0.5 draw (5 %), 0 loss."""
    a, b = rng.sample(sorted(skills), 2)
    if rng.random() < 0.05:
        return a, b, 0.5
    p_a = 1.0 / (1.0 + math.exp(skills[b] - skills[a]))
    return a, b, 1.0 if rng.random() < p_a else 0.0


async def run(pool: str, players: int, games: int, rate: float, seed: int) -> int:
    rng = random.Random(seed)
    skills = {f"player-{i:03d}": rng.gauss(0.0, 1.0) for i in range(players)}
    sent = 0
    # Ctrl-C or SIGTERM ends the loop between two games; leaving the `async with` then flushes what
    # was sent, so a stopped game server loses no result it reported as published
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Publisher(deterministic_ids=False) as pub:
        while not stop.is_set() and (games <= 0 or sent < games):
            a, b, score = play(rng, skills)
            await pub.match(pool, a, b, score, time=int(time.time() * 1000))
            sent += 1
            if sent % 100 == 0:
                await pub.flush()
                print(f"{sent} games published to pool {pool!r}", flush=True)
            if rate > 0:
                await asyncio.sleep(1.0 / rate)
    return sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", default="arena")
    ap.add_argument("--players", type=int, default=50)
    ap.add_argument("--games", type=int, default=500, help="games to publish; 0: until Ctrl-C")
    ap.add_argument("--rate", type=float, default=0.0, help="games a second; 0: as fast as the broker takes them")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    sent = asyncio.run(run(args.pool, args.players, args.games, args.rate, args.seed))
    print(f"done: {sent} games published to pool {args.pool!r}")


if __name__ == "__main__":
    main()
