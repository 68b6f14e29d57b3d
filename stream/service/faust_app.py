"""The worker's Faust app: its settings and the departures from Faust's own code it runs with.

Faust settings: short rebalance/session timeouts (with Faust's 60 s defaults the first join waits
for most of them), no idempotent producer (Tansu answers InitProducerId with an error), at-least-once processing
with the effectively-once step in Redis, memory:// store (state is in Redis), topics created by
``stream.service.topics`` (never declared by Faust), our own HTTP server.
"""

from __future__ import annotations

from typing import Any

import faust

from stream.service.config import Settings
from stream.service.faust_patches import patch_fetch_wait, patch_inline_delivery

#: seconds the producer waits for the broker's acknowledgement of a request before it fails it
PRODUCER_REQUEST_TIMEOUT_S = 30.0


def faust_kwargs(s: Settings) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        broker=";".join(f"kafka://{h.strip()}" for h in s.kafka_bootstrap.split(",") if h.strip()),
        store="memory://",
        value_serializer="raw",
        key_serializer="raw",
        processing_guarantee="at_least_once",
        broker_rebalance_timeout=4.0,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_commit_interval=0.5,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger_ms=1,
        producer_max_batch_size=s.producer_batch_bytes,
        producer_max_request_size=s.producer_max_request_bytes,
        # a batch the broker has not acknowledged by then fails and is sent again by the worker
        # (stream.service.publish), which then reports that it waits; Faust's default is 20 minutes
        producer_request_timeout=PRODUCER_REQUEST_TIMEOUT_S,
        topic_disable_leader=True,
        topic_allow_declare=False,  # created up front by stream.service.topics
        web_enabled=False,  # our own aiohttp server (stream.service.http)
        stream_wait_empty=False,
        # Faust wants a data directory even with memory:// stores; keep it out of the cwd
        datadir=s.faust_state_dir(),
    )
    ctx = s.ssl_context()
    if "SASL" in s.security_protocol.upper():
        kw["broker_credentials"] = faust.SASLCredentials(
            username=s.sasl_username, password=s.sasl_password.get_secret_value(), ssl_context=ctx,
            mechanism=s.sasl_mechanism)
    elif ctx is not None:
        kw["broker_credentials"] = faust.SSLCredentials(ctx)
    return kw


def faust_app(s: Settings, app_id: str, *, worker_patches: bool = True) -> faust.App:
    """A Faust app with the worker's settings and its departures from Faust (``stream.service.faust_patches``):
    the fetch wait and, with ``worker_patches``, the inline hand-over of fetched records (without: Faust's
    own, the bare loop of ``mmr bench service``)."""
    patch_fetch_wait(s.fetch_max_wait_ms, s.fetch_idle_wait_ms)
    if worker_patches:
        patch_inline_delivery()
    return faust.App(app_id, **faust_kwargs(s))
