"""Creating the service's topics up front.

Tansu 0.6 does not auto-create topics on metadata requests, and a real Kafka cluster
usually has auto-creation off too; the worker, the publisher and the benchmark call
``ensure_topics`` before producing or consuming. The ratings topic is compacted (one
message per pool+player survives); brokers that reject the config get it without.
"""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from stream.service.config import Settings

log = logging.getLogger(__name__)


def topic_specs(s: Settings) -> dict[str, dict[str, str]]:
    """name -> topic configs."""
    return {
        s.topic_matches: {},
        s.topic_rounds: {},
        s.topic_results: {},
        s.topic_ratings: {"cleanup.policy": "compact"},
        s.topic_dead: {},
    }


async def ensure_topics(s: Settings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap, **s.aiokafka_kwargs())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        for name, configs in topic_specs(s).items():
            if name in existing:
                continue
            for cfg in (configs, {}):
                try:
                    await admin.create_topics([NewTopic(name, s.partitions, s.replication, topic_configs=cfg)])
                    break
                except TopicAlreadyExistsError:
                    break
                except KafkaError as exc:
                    if not cfg:
                        raise
                    log.warning("topic %s: broker rejected %s (%r); creating without", name, cfg, exc)
    finally:
        await admin.close()
