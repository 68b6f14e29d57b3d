"""Which rating system rates which pool."""

from __future__ import annotations

import logging
from typing import Any

from stream.engine.pool import PoolEngine
from stream.service.config import PoolConfig, Settings
from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)


class PoolRegistry:
    """Which system rates which pool: Redis meta (fixed at first commit) > config > defaults."""

    def __init__(self, settings: Settings, store: RedisStore) -> None:
        self.settings = settings
        self.store = store
        self.engines: dict[str, PoolEngine] = {}
        self.unsaved: dict[str, dict[str, Any]] = {}  # pools whose meta is not in Redis yet

    def forget(self, pool: str) -> None:
        self.engines.pop(pool, None)
        self.unsaved.pop(pool, None)

    async def engine(self, pool: str) -> PoolEngine:
        eng = self.engines.get(pool)
        if eng is not None:
            return eng
        stored = await self.store.meta(pool)
        if stored is None:
            cfg = self.settings.system_for(pool)  # checked when the worker started
            eng = self.engines[pool] = PoolEngine.of_params(pool, cfg.system, cfg.params)
            self.unsaved[pool] = {"system": cfg.system, "params": cfg.params}
            return eng
        cfg = PoolConfig(stored["system"], stored["params"])
        wanted = self.settings.pools.get(pool)
        if wanted is not None and (wanted.system, wanted.params) != (cfg.system, cfg.params):
            log.warning("pool %s: Redis holds %s %s; ignoring configured %s %s", pool, cfg.system,
                        cfg.params, wanted.system, wanted.params)
        eng = self.engines[pool] = PoolEngine.from_meta(pool, cfg.system, cfg.params)
        return eng
