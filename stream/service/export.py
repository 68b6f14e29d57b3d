"""``mmr export --out FILE [--pool P]``: the ratings held in Redis, as ``mmr replay --out`` writes them.

Each pool's beliefs are decoded with the system recorded in the pool's meta at its first
commit (not with whatever the exporter's environment says), so an export is always
consistent with what the worker computed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import click

from stream.engine.pool import PoolEngine
from stream.ratings.base import RatingError
from stream.service.config import Settings, from_env
from stream.state.redis_store import RedisStore


async def export_rows(store: RedisStore, pools: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """docs/interface.md replay rows for the given pools (all known pools by default), players sorted."""
    rows: list[dict[str, Any]] = []
    for pool in pools if pools else await store.pools():
        meta = await store.meta(pool)
        if meta is None:
            continue
        eng = PoolEngine.from_meta(pool, meta["system"], meta["params"])
        chunk: list[tuple[str, bytes]] = []
        async for part in store.scan_players(pool):
            chunk.extend(part)
        for player, raw in sorted(chunk):
            try:
                r = eng.rating_of(player, raw)
            except RatingError as exc:
                raise RatingError(f"pool {pool!r}: {exc}") from exc
            rows.append({"pool": pool, "player": player, "rating": r.rating, "mu": r.mu, "sigma": r.sigma,
                         "rounds": r.rounds})
    return rows


async def _export(s: Settings, pools: Sequence[str] | None) -> list[dict[str, Any]]:
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, cluster=s.redis_cluster, **s.redis_kwargs())
    try:
        return await export_rows(store, pools)
    finally:
        await store.close()


@click.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output JSONL file.")
@click.option("--pool", "pools", multiple=True, help="Only this pool (repeatable; default: all).")
def export(out: str, pools: tuple[str, ...]) -> None:
    """Write every player's rating held in Redis (REDIS_URL, MMR_KEY_PREFIX) as JSONL."""
    from stream.files import write_jsonl_atomic

    try:
        rows = asyncio.run(_export(from_env(), list(pools) or None))
    except RatingError as exc:  # a stored value that is not a belief, a refused pool meta: name it
        raise click.ClickException(str(exc)) from exc
    n = write_jsonl_atomic(out, iter(rows))
    click.echo(f"wrote {n} ratings to {out}", err=True)
