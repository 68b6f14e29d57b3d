"""A worker on the test broker and Redis that has rated a small history: what the console's API
tests (test_console_api.py) and browser tests (tests/browser) read."""

from __future__ import annotations

import random
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from service_utils import WorkerProcess, announced_port, make_settings, produce_raw, read_json_topic, wait_caught_up

from stream.service.config import Settings

#: a pool name the default route pattern refused, and one plain
POOLS = ("lg{1}", "ladder")
TOKEN = "s3cret-token"
HISTORY_LIMIT = 3


@dataclass
class World:
    s: Settings
    worker: WorkerProcess
    port: int
    outputs: list[dict[str, Any]]  # the rating messages published, in topic order
    token: str

    def get(self, path: str, token: str | None = "", timeout: float = 10.0) -> tuple[int, Any]:
        """(status, body) of ``GET path``; ``token`` "" sends the world's token, None none."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        sent = self.token if token == "" else token
        if sent:
            req.add_header("Authorization", f"Bearer {sent}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, body, kind = resp.status, resp.read(), resp.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            status, body, kind = exc.code, exc.read(), exc.headers.get_content_type()
        return status, orjson.loads(body) if kind == "application/json" else body.decode()

    def latest(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Each player's published rating of the highest version."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for o in self.outputs:
            key = (o["pool"], o["player"])
            if key not in out or o["version"] > out[key]["version"]:
                out[key] = o
        return out


def matches(pool: str, n: int, players: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(players)] + ["odd {id}/x"]  # an id that needs percent-encoding
    out = []
    for i in range(n):
        a, b = rng.sample(names, 2)
        out.append({"type": "match", "event_id": f"{pool}-m{i}", "pool": pool, "time": 1_700_000_000_000 + i * 60_000,
                    "a": a, "b": b, "score": rng.choice([0.0, 0.5, 1.0])})
    return out


def start_world(kafka: str, redis_url: str, tmp: Path, rounds_of: int = 4, **env: str) -> World:
    """A worker with a bearer token and a history limit; ``rounds_of`` produce calls per pool (each
    its own batch, so a player's ratings are published in several versions)."""
    s = make_settings(kafka, redis_url, system="elo-mmx", history_limit=HISTORY_LIMIT)
    worker = WorkerProcess(s, tmp / "worker.log")
    worker.extra_env = {"MMR_HTTP_TOKEN": TOKEN, **env}
    worker.start()
    try:
        port = announced_port(worker)
        for k in range(rounds_of):
            for j, pool in enumerate(POOLS):
                events = matches(pool, 12, 6, seed=100 * k + j)
                for e in events:
                    e["event_id"] += f"-{k}"
                    e["time"] += k * 3_600_000
                produce_raw(s, s.topic_matches, [(pool.encode(), orjson.dumps(e)) for e in events])
            wait_caught_up(s, worker, timeout=240)
        bad = {"type": "match", "event_id": "bad-1", "pool": POOLS[1], "time": 1, "a": "p0", "b": "p1", "score": 2}
        produce_raw(s, s.topic_matches, [(POOLS[1].encode(), orjson.dumps(bad))])  # a dead letter, with its reason
        wait_caught_up(s, worker, timeout=240)
        outputs = read_json_topic(s, s.topic_ratings)
    except BaseException:
        worker.stop()
        raise
    return World(s, worker, port, outputs, TOKEN)
