"""A stream of matches and whole rounds over many pools, for the outage tests (a master killed, Redis
restarted): the batches as the worker would take them and the state the embedded replay gives."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
from service_utils import SIDED_POOLS, embedded_state, pool_systems, sided_event

from stream.service.config import PoolConfig, Settings
from stream.service.processor import Message

MATCH_POOLS = [f"m{i}" for i in range(16)]
ROUND_POOLS = [f"r{i}" for i in range(8)]


def outage_pools(matches_system: str = "elo", rounds_system: str = "elo-mmr", sided: bool = False,
                 ) -> dict[str, PoolConfig]:
    """``Settings.pools`` of the stream: its match pools rated by ``matches_system``, its round pools by
    ``rounds_system`` (what ``replayed`` replays with); with ``sided``, the pools of ``sided_event`` too."""
    return pool_systems({**dict.fromkeys(MATCH_POOLS, matches_system), **dict.fromkeys(ROUND_POOLS, rounds_system),
                         **(SIDED_POOLS if sided else {})})


SETTINGS = Settings(pools=outage_pools())


def events(n_batches: int, per_batch: int, seed: int, sided: bool = False) -> list[list[dict[str, Any]]]:
    """Batches of matches (80 %) and whole rounds over all pools, in time order; with ``sided``, a third
    of the events are ``sided_event``s instead (matches with a home side, team rounds with side labels)."""
    rng = random.Random(seed)
    side_rng = random.Random(seed + 1)  # (without ``sided``, the stream is the same as before)
    batches, t = [], 0
    for _ in range(n_batches):
        batch = []
        for _ in range(per_batch):
            t += 1
            if sided and side_rng.random() < 0.33:
                batch.append(sided_event(side_rng, t))
            elif rng.random() < 0.8:
                pool = rng.choice(MATCH_POOLS)
                a, b = rng.sample(range(12), 2)
                batch.append({"type": "match", "event_id": f"{pool}-e{t}", "pool": pool, "time": t,
                              "a": f"pl{a}", "b": f"pl{b}", "score": rng.choice([0.0, 0.5, 1.0])})
            else:
                pool = rng.choice(ROUND_POOLS)
                players = rng.sample(range(10), 5)
                batch.append({"type": "round", "event_id": f"{pool}-e{t}", "pool": pool, "round_id": f"R{t}",
                              "time": t, "standings": [{"player": f"pl{p}", "rank": r + 1}
                                                       for r, p in enumerate(players)]})
        batches.append(batch)
    return batches


def messages(batches: list[list[dict[str, Any]]]) -> list[list[Message]]:
    """The batches as Kafka messages of one partition, offsets in order."""
    out, offset = [], 0
    for batch in batches:
        out.append([Message("in", 0, offset + i, orjson.dumps(ev)) for i, ev in enumerate(batch)])
        offset += len(batch)
    return out


def history(batches: list[list[dict[str, Any]]], tmp: Path, name: str = "history.jsonl") -> Path:
    """The batches as one JSONL history file (what ``mmr replay`` reads)."""
    path = tmp / name
    path.write_bytes(b"".join(orjson.dumps(ev) + b"\n" for batch in batches for ev in batch))
    return path


def replayed(batches: list[list[dict[str, Any]]], tmp: Path, matches_system: str = "elo",
             rounds_system: str = "elo-mmr", advantages: dict[str, dict[bytes, bytes]] | None = None,
             ) -> dict[tuple[str, str], dict[str, Any]]:
    """The embedded replay of the batches: (pool, player) -> exported row; ``advantages``: gets the pools'
    learned side advantages as Redis should hold them (``service_utils.embedded_state``)."""
    systems: dict[str, tuple[str, dict[str, Any]]] = {p: (matches_system, {}) for p in MATCH_POOLS}
    systems.update((p, (rounds_system, {})) for p in ROUND_POOLS)
    systems.update((p, (name, {})) for p, name in SIDED_POOLS.items())
    return embedded_state([history(batches, tmp)], matches_system, pool_systems=systems, advantages=advantages)
