"""Reaching Redis and the broker before anything else: one clear line when that fails.

Why: redis-py and aiokafka retry a failing connection and then report it in their own words
(aiokafka: "Unable to bootstrap from [...]" whatever the cause; redis-py: a wrong password as a
connection error the worker would retry for ever). So a command that needs them first connects once
to each, with a short timeout and no retry, and raises a ``stream.errors.ConnectError`` naming the
component, its address (secrets masked) and the cause (wrong password, unreachable, TLS, SASL).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from stream.errors import ConnectError
from stream.service.config import Settings

#: seconds each check waits for an answer
TIMEOUT_S = 3.0
KAFKA_PORT = 9092


def check_redis(s: Settings, timeout_s: float = TIMEOUT_S) -> None:
    """Connect to ``REDIS_URL`` and ``PING`` it once; ``ConnectError`` naming the cause."""
    from stream.state.redis_client import ping  # redis-py: not for the client's check of the broker

    ping(s.redis_url, timeout_s, **s.redis_kwargs())


def _hosts(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = port, str(KAFKA_PORT)
        out.append((host.strip("[]"), int(port) if port.isdigit() else KAFKA_PORT))
    return out


async def check_kafka(s: Settings, timeout_s: float = TIMEOUT_S) -> None:
    """Open one connection to a bootstrap server of ``KAFKA_BOOTSTRAP_SERVERS``, with the settings'
    TLS and SASL, as the clients will; ``ConnectError`` naming the cause when none of them answers."""
    from aiokafka.conn import create_conn

    kw: dict[str, Any] = s.aiokafka_kwargs()
    first: ConnectError | None = None
    for host, port in _hosts(s.kafka_bootstrap):
        try:
            conn = await asyncio.wait_for(create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **kw),
                                          timeout_s)
        except Exception as exc:
            first = first or kafka_error(exc, s, timeout_s)
            continue
        conn.close()
        return
    if first is not None:
        raise first


def kafka_error(exc: BaseException, s: Settings, timeout_s: float = TIMEOUT_S) -> ConnectError:
    """What ``exc``, met connecting to the broker, means for an operator."""
    from aiokafka import errors as kerr

    where = s.kafka_bootstrap
    detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
    sasl = "SASL" in s.security_protocol
    if isinstance(exc, kerr.UnsupportedSaslMechanismError | kerr.IllegalSaslStateError):
        cause = (f"SASL refused: the broker does not offer {s.sasl_mechanism} (MMR_KAFKA_SASL_MECHANISM) or does "
                 f"not use SASL on this listener (MMR_KAFKA_SECURITY_PROTOCOL={s.security_protocol})")
        return ConnectError("Kafka", where, cause, detail, retry=False)
    if isinstance(exc, kerr.SaslAuthenticationFailed) or (sasl and "authentication" in str(exc).lower()):
        return ConnectError("Kafka", where, f"SASL authentication failed: wrong user or password "
                            f"(MMR_KAFKA_SASL_USERNAME, MMR_KAFKA_SASL_PASSWORD) for {s.sasl_mechanism}", detail,
                            retry=False)
    if isinstance(exc, ssl.SSLError):
        return ConnectError("Kafka", where, "TLS handshake failed (a listener without TLS, or a certificate not "
                            "trusted: MMR_KAFKA_SSL_CAFILE)", detail, retry=False)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        if "SSL" in s.security_protocol:
            return ConnectError("Kafka", where, f"no answer to the TLS handshake within {timeout_s:g} s (a listener "
                                "without TLS? MMR_KAFKA_SECURITY_PROTOCOL)", retry=False)
        return ConnectError("Kafka", where, f"unreachable: no answer within {timeout_s:g} s", retry=True)
    if isinstance(exc, OSError | kerr.KafkaConnectionError):
        return ConnectError("Kafka", where, "unreachable", detail, retry=True)
    return ConnectError("Kafka", where, "connection failed", detail, retry=True)


def check(s: Settings, *, redis: bool = True, kafka: bool = True, timeout_s: float = TIMEOUT_S) -> None:
    """``check_redis`` and ``check_kafka`` (those asked for), Redis first."""
    if redis:
        check_redis(s, timeout_s)
    if kafka:
        asyncio.run(check_kafka(s, timeout_s))
