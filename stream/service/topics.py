"""Creating the service's topics up front, and the worker's output topics again when they vanish.

A real Kafka cluster usually has auto-creation off, and a broker that creates a topic on a produce
(Tansu does) gives it its own defaults: ``ensure_topics`` runs before producing or consuming. The
ratings topic is compacted (one message per pool+player survives) where the broker accepts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from stream.service.config import Settings

log = logging.getLogger(__name__)

#: how long a check of the output topics waits for the broker (a broker that does not answer is reported)
CHECK_TIMEOUT_MS = 10_000


def topic_specs(s: Settings) -> dict[str, dict[str, str]]:
    """name -> topic configs."""
    specs: dict[str, dict[str, str]] = {name: {} for name in s.input_topics()}
    specs[s.topic_ratings] = {"cleanup.policy": "compact"}
    specs[s.topic_dead] = {}
    return specs


async def ensure_topics(s: Settings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap, **s.aiokafka_kwargs())
    await admin.start()
    try:
        await _create_missing(admin, s, topic_specs(s), set(await admin.list_topics()))
    finally:
        await admin.close()


async def _create_missing(admin: AIOKafkaAdminClient, s: Settings, specs: dict[str, dict[str, str]],
                          existing: set[str]) -> list[str]:
    """Create each topic of ``specs`` not in ``existing``; the names created."""
    created = []
    for name, configs in specs.items():
        if name in existing:
            continue
        for cfg in (configs, {}):
            try:
                await admin.create_topics([NewTopic(name, s.partitions, s.replication, topic_configs=cfg)])
                created.append(name)
                break
            except TopicAlreadyExistsError:
                break
            except KafkaError as exc:
                if not cfg:
                    raise
                log.warning("topic %s: broker rejected %s (%r); creating without", name, cfg, exc)
    return created


class OutputTopics:
    """The worker's output topics (ratings, dead letters) as the broker has them: ``ensure`` creates a
    missing one again (``topic_specs``); ``check_partitions`` also stops the worker (``on_changed``) when a
    partition count changed, since its keys would no longer land where their compacted history is."""

    def __init__(self, s: Settings, on_changed: Callable[[str], None] | None = None) -> None:
        self.s = s
        self.names = (s.topic_ratings, s.topic_dead)
        self.partitions: dict[str, int] = {}  # name -> partitions when first seen
        self.recreated = 0
        self.changed: str | None = None
        self.on_changed = on_changed or (lambda _: os.kill(os.getpid(), signal.SIGTERM))
        self._admin: AIOKafkaAdminClient | None = None
        self._lock = asyncio.Lock()
        self._listed_at = -1.0  # when the last listing that found every output topic began (``ensure``)

    async def _client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.s.kafka_bootstrap, request_timeout_ms=CHECK_TIMEOUT_MS,
                                        **self.s.aiokafka_kwargs())
            await admin.start()
            self._admin = admin
        return self._admin

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()

    async def ensure(self, since: float | None = None) -> str | None:
        """Create the missing output topics again. None when all were there; else what was wrong (the
        caller sends the outputs sent since again), a broker that does not answer included. ``since``
        (``time.monotonic()``, default now): a listing begun then or later that found every topic answers
        for this call too, so that the batches acknowledged during one listing share the next."""
        since = time.monotonic() if since is None else since
        async with self._lock:
            if self._listed_at >= since:
                return None
            began = time.monotonic()
            try:
                admin = await self._client()
                existing = set(await admin.list_topics())
                missing = [n for n in self.names if n not in existing]
                if not missing:
                    self._listed_at = began
                    return None
                specs = topic_specs(self.s)
                created = await _create_missing(admin, self.s, {n: specs[n] for n in missing}, existing)
            except KafkaError as exc:
                return f"the broker's topics could not be listed ({exc!r})"
            for name in created:
                self.partitions[name] = self.s.partitions
                self.recreated += 1
            log.warning("output topic(s) %s missing on the broker; created again as at start", ", ".join(missing))
            return f"output topic(s) {', '.join(missing)} were missing"

    async def check_partitions(self) -> str | None:
        """``ensure``, then the partition counts (None: as first seen). The housekeeping timer's, once a tick:
        ``ensure`` alone is one request (a batch's), this a second."""
        error = await self.ensure()
        if error is not None:
            return error
        try:
            described = await (await self._client()).describe_topics(list(self.names))
        except KafkaError as exc:
            return f"the broker's topics could not be described ({exc!r})"
        return self._compare((t["topic"], len(t["partitions"])) for t in described if not t["error_code"])

    def _compare(self, counts: Iterable[tuple[str, int]]) -> str | None:
        for name, n in counts:
            first = self.partitions.setdefault(name, n)
            if n != first and self.changed is None:
                self.changed = (f"output topic {name} has {n} partitions, the worker started with {first}: it was "
                                "created again by someone else (a broker that creates topics on produce?); the worker "
                                f"stops. Create it with {first} partitions, or restart the worker to take {n}")
                log.error("%s", self.changed)
                self.on_changed(self.changed)
        return self.changed
