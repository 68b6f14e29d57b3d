"""The one way the service connects to Redis: a single server or a Redis Cluster, from one URL.

``connect`` asks the node ``REDIS_URL`` names (``INFO cluster``) unless told (``MMR_REDIS_CLUSTER``)
and returns redis-py's asyncio client of that kind. Every multi-key command and script of the store
stays inside one pool's hash slot (stream.state.keys), so the two clients run the same code.

Errors of the infrastructure (unreachable, timeouts, MOVED/ASK/TRYAGAIN, CLUSTERDOWN, READONLY,
MASTERDOWN, LOADING, OOM) say nothing about the input: redis-py retries what it can and
``infrastructure_errors`` turns the rest into ``StoreUnavailable``, which the worker retries with
back-off instead of dead-lettering valid events. Refused credentials and a failed TLS handshake are
not outages: ``connect_error`` names them (``ConnectError``), ``ping`` raises that at once and
``is_cluster`` does not wait through them; met by a running client they are ``CredentialsRefused``.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import redis
import redis.asyncio as aioredis
import redis.cluster
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry

from stream.errors import ConnectError, InfrastructureError
from stream.redact import mask, mask_url, url_secrets

log = logging.getLogger(__name__)

AnyRedis = aioredis.Redis | RedisCluster
#: the blocking clients of the same two kinds (``connect_blocking``)
AnyBlockingRedis = redis.Redis | redis.cluster.RedisCluster


class StoreUnavailable(InfrastructureError, rex.ConnectionError):
    """Redis could not do the operation now: nothing is wrong with the input; retry the whole step
    later. A ``redis.exceptions.ConnectionError`` so that code catching that keeps catching this."""


class CredentialsRefused(StoreUnavailable):
    """Redis refused the credentials (a wrong or missing password or user, an ACL): a ``StoreUnavailable``,
    so the input is kept, never dead-lettered, but waiting does not fix it: the worker stops on the first
    one (``Service.credentials_refused``)."""


#: reply prefixes of transient server states that redis-py reports as a plain ResponseError
_TRANSIENT_REPLIES = ("LOADING", "BUSY ", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK ", "OOM ",
                      "READONLY", "NOREPLICAS", "UNBLOCKED")

_INFRASTRUCTURE = (rex.ConnectionError, rex.TimeoutError, rex.ClusterError, rex.AskError, rex.TryAgainError,
                   rex.ReadOnlyError, rex.OutOfMemoryError, rex.RedisClusterException, OSError)


def is_infrastructure_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis (or the way to it) failing rather than the request."""
    if isinstance(exc, StoreUnavailable):
        return True
    if isinstance(exc, (rex.ClusterCrossSlotError, rex.CrossSlotTransactionError)):
        return False  # a request that can never succeed: a bug, not an outage
    if isinstance(exc, _INFRASTRUCTURE):
        return True
    return isinstance(exc, rex.ResponseError) and str(exc).startswith(_TRANSIENT_REPLIES)


@contextlib.contextmanager
def infrastructure_errors() -> Iterator[None]:
    """Re-raise infrastructure errors (``is_infrastructure_error``) as ``StoreUnavailable``, and refused
    credentials (``is_auth_error``) as ``CredentialsRefused``."""
    try:
        yield
    except StoreUnavailable:
        raise
    except Exception as exc:
        if is_auth_error(exc):  # before the outages: NOPERM and WRONGPASS replies are not ConnectionErrors
            raise CredentialsRefused(f"Redis refused the credentials: {type(exc).__name__}: {exc} (REDIS_URL, "
                                     "MMR_REDIS_USERNAME, MMR_REDIS_PASSWORD)") from exc
        if is_infrastructure_error(exc):
            hint = ""
            if isinstance(exc, rex.AskError):  # the cluster client follows these itself: a plain client met a cluster
                hint = " (a slot of a Redis Cluster: is MMR_REDIS_CLUSTER=0 set for a cluster?)"
            raise StoreUnavailable(f"Redis unavailable: {type(exc).__name__}: {exc}{hint}") from exc
        raise


#: reply prefixes of refused credentials (redis-py raises some as AuthenticationError, some as ResponseError)
_AUTH_REPLIES = ("WRONGPASS", "NOAUTH", "NOPERM", "invalid password", "invalid username-password",
                 "Client sent AUTH, but no password is set", "AUTH <password> called without any password")


def is_auth_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing the credentials (wrong or missing password or user)."""
    if isinstance(exc, rex.AuthenticationError | rex.AuthenticationWrongNumberOfArgsError | rex.NoPermissionError):
        return True  # (redis-py strips a mapped reply's code: a NoPermissionError's text has no "NOPERM")
    return isinstance(exc, rex.ResponseError) and str(exc).startswith(_AUTH_REPLIES)


def _is_tls_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "SSL" in str(seen).split(":")[0] or "CERTIFICATE" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def connect_error(exc: BaseException, url: str) -> ConnectError | None:
    """``exc`` met on the way to Redis at ``url`` as a ``ConnectError`` naming its cause (None: not a
    failure to reach or to log in to Redis)."""
    if isinstance(exc, ConnectError):
        return exc
    detail = mask(str(exc).strip() or type(exc).__name__, url_secrets(url))
    if is_auth_error(exc):
        text = str(exc)
        missing = text.startswith("NOAUTH") or "Authentication required" in text or "already authenticated" in text
        cause = ("authentication required: the server has a password and none was given (set it in REDIS_URL, "
                 "MMR_REDIS_PASSWORD or MMR_REDIS_PASSWORD_FILE)" if missing else
                 "authentication failed: the user's ACL does not allow a command the worker runs"
                 if isinstance(exc, rex.NoPermissionError) or text.startswith("NOPERM")
                 else "authentication failed: wrong password or user")
        return ConnectError("Redis", mask_url(url), cause, detail, retry=False)
    if _is_tls_error(exc):
        return ConnectError("Redis", mask_url(url), "TLS handshake failed (rediss:// to a server without TLS, "
                            "or a certificate not trusted: MMR_REDIS_CA_CERTS)", detail, retry=False)
    if isinstance(exc, rex.ConnectionError | rex.TimeoutError | OSError):
        return ConnectError("Redis", mask_url(url), "unreachable", detail, retry=True)
    return None


def ping(url: str, timeout_s: float = 3.0, **kwargs: Any) -> None:
    """Connect to ``url`` once and ``PING`` it, within about ``timeout_s``; raise ``ConnectError`` naming
    the cause (no retry: the caller decides whether waiting helps)."""
    client = _probe(url, timeout_s, timeout_s, kwargs)
    try:
        client.ping()
    except Exception as exc:
        err = connect_error(exc, url)
        if err is None:
            raise
        raise err from exc
    finally:
        client.close()


def _probe(url: str, connect_s: float, timeout_s: float, kwargs: dict[str, Any]) -> redis.Redis:
    """A blocking client of the node ``url`` names, without its DB (a cluster node refuses SELECT), that
    tries each command once, with the credentials and CA of ``kwargs``."""
    kw = {k: v for k, v in kwargs.items() if k in ("username", "password", "ssl_ca_certs")}
    return redis.Redis.from_url(urlparse(url)._replace(path="").geturl(), socket_connect_timeout=connect_s,
                                socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0), **kw)


def _retry() -> AsyncRetry:
    # a few quick retries inside redis-py (a reconnect, a slot map refresh); longer outages are the
    # caller's: StoreUnavailable, retried with its own back-off. The asyncio clients take the asyncio
    # Retry: given the blocking one, redis-py >= 8.2 converts it and warns at every connection.
    return AsyncRetry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=3)


def is_cluster(url: str, wait_s: float = 10.0, **kwargs: Any) -> bool:
    """Whether the server ``url`` names runs in cluster mode (``INFO cluster``), waiting up to
    ``wait_s`` for it to answer. A server that refuses INFO is taken for a single server; refused
    credentials and a failed TLS handshake raise ``ConnectError`` at once (waiting does not fix them)."""
    deadline = time.monotonic() + wait_s
    delay = 0.1
    while True:
        client = _probe(url, 2, 5, kwargs)
        try:
            info = client.info("cluster")
            return bool(int(info.get("cluster_enabled", 0)))
        except Exception as exc:
            err = connect_error(exc, url)
            if err is not None and not err.retry:
                raise err from exc
            if isinstance(exc, rex.ResponseError):
                log.warning("INFO cluster refused (%s): taking %s for a single server; set MMR_REDIS_CLUSTER to "
                            "say which", exc, mask_url(url))
                return False
            if err is None:
                raise
            if time.monotonic() + delay > deadline:
                raise StoreUnavailable(f"Redis at {mask_url(url)} did not answer within {wait_s} s ({exc!r}); "
                                       "set MMR_REDIS_CLUSTER=0 or 1 to start without asking it") from exc
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        finally:
            client.close()


def connect(url: str, cluster: bool | None = None, **kwargs: Any) -> AnyRedis:
    """An asyncio client for ``url``: a ``RedisCluster`` when ``cluster`` (None: ask the server).

    ``kwargs`` go to the client (credentials, TLS, timeouts). A cluster has only DB 0."""
    if cluster is None:
        cluster = is_cluster(url, **kwargs)
    kwargs.setdefault("retry", _retry())
    if not cluster:
        return aioredis.Redis.from_url(url, **kwargs)
    _cluster_db(url)
    return RedisCluster.from_url(url, **kwargs)


def connect_blocking(url: str, cluster: bool, **kwargs: Any) -> AnyBlockingRedis:
    """A blocking client for ``url`` of the kind ``connect`` gives, that tries each command once
    (its caller asks again later): for a thread of its own, timed by the socket's timeouts rather
    than by an event loop that may be busy."""
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    if not cluster:
        return redis.Redis.from_url(url, **kwargs)
    _cluster_db(url)
    return redis.cluster.RedisCluster.from_url(url, **kwargs)


def _cluster_db(url: str) -> None:
    db = urlparse(url).path.strip("/")
    if db not in ("", "0"):
        raise ValueError(f"REDIS_URL {mask_url(url)} names DB {db}: a Redis Cluster has only DB 0")

