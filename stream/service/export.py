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

from stream.engine.embedded import advantage_row
from stream.engine.pool import PoolEngine
from stream.ratings.base import RatingError
from stream.service.config import Settings, from_env
from stream.state.redis_store import RedisStore


async def export_rows(store: RedisStore, pools: Sequence[str] | None = None,
                      advantages: bool = False) -> list[dict[str, Any]]:
    """docs/interface.md replay rows for the given pools (all known pools by default), players sorted;
    with ``advantages``, after every player's, a line per pool that learned a side advantage
    (``advantage_row``, as ``mmr replay --advantages`` writes it)."""
    rows: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []  # the advantage lines, after every player's
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
        learned = eng.advantages.load(await store.advantages(pool)) if advantages else None
        if learned is not None and learned.sides:
            lines.append(advantage_row(pool, learned.as_dict()))
    return rows + lines


async def _export(s: Settings, pools: Sequence[str] | None, advantages: bool = False) -> list[dict[str, Any]]:
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, cluster=s.redis_cluster, **s.redis_kwargs())
    try:
        return await export_rows(store, pools, advantages)
    finally:
        await store.close()


@click.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output JSONL file.")
@click.option("--pool", "pools", multiple=True, help="Only this pool (repeatable; default: all).")
@click.option("--advantages", is_flag=True,
              help='Also a line per pool with its learned side advantage ({"type": "advantage", ...}).')
def export(out: str, pools: tuple[str, ...], advantages: bool) -> None:
    """Write every player's rating held in Redis (REDIS_URL, MMR_KEY_PREFIX) as JSONL."""
    from stream.files import write_jsonl_atomic

    try:
        rows = asyncio.run(_export(from_env(), list(pools) or None, advantages))
    except RatingError as exc:  # a stored value that is not a belief, a refused pool meta: name it
        raise click.ClickException(str(exc)) from exc
    lines = sum(1 for r in rows if r.get("type") == "advantage")
    n = write_jsonl_atomic(out, iter(rows)) - lines
    click.echo(f"wrote {n} ratings{f' and {lines} advantages' if lines else ''} to {out}", err=True)
