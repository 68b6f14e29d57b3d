"""Service configuration: environment variables (12-factor) plus an optional pools file.

Everything the worker, the publisher, the exporter and the benchmarks need is a field of
``Settings``, declared once together with the variable it is read from and parsed by the
grammar of ``stream.config``. Tests and tools build Settings in code (``Settings(...)``,
``settings.with_(...)``) without touching ``os.environ``; docs/operator.md documents each
variable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from stream.config import (
    EngineSettings,
    Secret,
    SettingError,
    check_fields,
    env_names,
    file_names,
    load,
    setting,
)
from stream.params import ParamError, parse_param_list
from stream.redact import mask_url, url_secrets

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

#: the Redis database of the benchmarks unless REDIS_URL names one (keeps them off the service's)
BENCH_REDIS_URL = "redis://127.0.0.1:6379/14"
#: the system of every pool neither the pools file nor ``--system`` / MMR_SYSTEM names: it rates every
#: event kind (matches, rounds of any size, team rounds), so no pool's events are refused by default
DEFAULT_SYSTEM = "elo-mmr"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
LogFormat = Literal["text", "json"]
#: what the worker does with a message whose rating step fails with a bug (stream.service.halts)
OnRatingBug = Literal["halt", "dead-letter"]

#: variables ``from_env`` reads beyond the fields' own: they fill several fields or a dict
COMPOSITE_NAMES = ("MMR_PARAMS", "MMR_POOLS_FILE")
#: variables that chose a pool's system by the kind of its first event: refused with this hint, as
#: ignoring them would rate with another system than the operator meant
REFUSED_NAMES = {name: "a pool's system does not depend on the kind of its events: set MMR_SYSTEM (every pool "
                       "without configuration) or name the pool in MMR_POOLS_FILE (docs/operator.md)"
                 for name in ("MMR_ROUNDS_SYSTEM", "MMR_MATCHES_SYSTEM")}
#: ``MMR_*`` variables read outside the package: the test harness (tests/conftest.py) and
#: the example matchmaker (deploy/matchmaker.py)
OUTSIDE_NAMES = ("MMR_TEST_REDIS_DB", "MMR_API")


#: each checked setting (beyond its type): whether a value is accepted, and what is expected
_BOUNDS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("seen_max_ids", lambda v: v >= 0, "0 (no limit) or a positive count"),
    ("max_step_players", lambda v: v >= 0, "0 (no limit) or a positive count"),
    ("gil_switch_ms", lambda v: 0 <= v < 1000,
     "0 (Python's default) or a positive number of milliseconds below 1000"),
    ("redis_min_replicas", lambda v: v >= -1, "-1 (auto: 1 when the master has a replica) or a count of replicas"),
    ("redis_wait_timeout_ms", lambda v: v > 0, "a positive number of milliseconds"),
    ("http_port", lambda v: 0 <= v <= 65535, "0 (any free port) to 65535"),
    ("http_redis_connections", lambda v: v >= 1, "a positive count"),
    ("http_max_requests", lambda v: v >= 1, "a positive count"),
    ("http_cpu_share", lambda v: 0 < v <= 1, "a share of a CPU in (0, 1]"),
    ("history_limit", lambda v: v >= 0, "0 (no history) or a count of ratings"),
)


@dataclass(frozen=True)
class PoolConfig:
    system: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """The worker's settings, each read from its variable; docs/operator.md, "Configuration", says what
    each one means and why its default is what it is."""

    kafka_bootstrap: str = setting("127.0.0.1:9092", "KAFKA_BOOTSTRAP_SERVERS")
    #: may hold a password (``redis://:PASSWORD@host``, ``?password=``): also ``REDIS_URL_FILE``
    redis_url: str = setting("redis://127.0.0.1:6379/0", "REDIS_URL", file=True)
    app_id: str = setting("mmr-stream", "MMR_APP_ID")
    topic_matches: str = setting("mmr-matches", "MMR_TOPIC_MATCHES")
    topic_rounds: str = setting("mmr-rounds", "MMR_TOPIC_ROUNDS")
    topic_results: str = setting("mmr-round-results", "MMR_TOPIC_ROUND_RESULTS")
    topic_ratings: str = setting("mmr-ratings", "MMR_TOPIC_RATINGS")
    topic_dead: str = setting("mmr-dead-letters", "MMR_TOPIC_DEAD_LETTERS")
    partitions: int = setting(4, "MMR_PARTITIONS")
    replication: int = setting(1, "MMR_REPLICATION")
    key_prefix: str = setting("mmr", "MMR_KEY_PREFIX")
    take_max: int = setting(4096, "MMR_TAKE_MAX")
    take_max_bytes: int = setting(16 << 20, "MMR_TAKE_MAX_BYTES")
    take_within: float = setting(0.02, "MMR_TAKE_WITHIN")
    max_inflight: int = setting(16384, "MMR_MAX_INFLIGHT")
    max_inflight_bytes: int = setting(4 << 20, "MMR_MAX_INFLIGHT_BYTES")
    max_merge_bytes: int = setting(2 << 20, "MMR_MAX_MERGE_BYTES")
    max_step_players: int = setting(50_000, "MMR_MAX_STEP_PLAYERS")
    belief_cache_mb: int = setting(256, "MMR_BELIEF_CACHE_MB")
    producer_batch_bytes: int = setting(256 * 1024, "MMR_PRODUCER_BATCH_BYTES")
    producer_max_request_bytes: int = setting(1_000_000, "MMR_PRODUCER_MAX_REQUEST_BYTES")
    fetch_max_wait_ms: int = setting(10, "MMR_FETCH_MAX_WAIT_MS")
    fetch_idle_wait_ms: int = setting(100, "MMR_FETCH_IDLE_WAIT_MS")
    numba_threads: int = setting(0, "MMR_NUMBA_THREADS")
    gil_switch_ms: float = setting(1.0, "MMR_GIL_SWITCH_MS")
    round_timeout_s: float = setting(300.0, "MMR_ROUND_TIMEOUT")
    max_participants: int = setting(100_000, "MMR_MAX_PARTICIPANTS")
    seen_max_ids: int = setting(0, "MMR_SEEN_MAX_IDS")
    http_host: str = setting("127.0.0.1", "MMR_HTTP_HOST")
    http_port: int = setting(0, "MMR_HTTP_PORT")
    http_redis_connections: int = setting(16, "MMR_HTTP_REDIS_CONNECTIONS")
    http_max_requests: int = setting(256, "MMR_HTTP_MAX_REQUESTS")
    http_cpu_share: float = setting(0.25, "MMR_HTTP_CPU_SHARE")
    http_token: Secret = setting(Secret(), "MMR_HTTP_TOKEN")
    http_token_file: str = setting("", "MMR_HTTP_TOKEN_FILE")
    history_limit: int = setting(100, "MMR_HISTORY_LIMIT")
    #: the system of every pool the pools file does not name (``system_for``), and its parameters
    #: (``MMR_PARAMS``, see ``from_env``)
    system: str = setting(DEFAULT_SYSTEM, "MMR_SYSTEM")
    default_params: dict[str, Any] = field(default_factory=dict)
    #: per-pool systems (``MMR_POOLS_FILE``, see ``load_pools``)
    pools: dict[str, PoolConfig] = field(default_factory=dict)
    security_protocol: SecurityProtocol = setting("PLAINTEXT", "MMR_KAFKA_SECURITY_PROTOCOL")
    sasl_mechanism: SaslMechanism = setting("PLAIN", "MMR_KAFKA_SASL_MECHANISM")
    sasl_username: str = setting("", "MMR_KAFKA_SASL_USERNAME")
    sasl_password: Secret = setting(Secret(), "MMR_KAFKA_SASL_PASSWORD")
    ssl_cafile: str = setting("", "MMR_KAFKA_SSL_CAFILE")
    ssl_certfile: str = setting("", "MMR_KAFKA_SSL_CERTFILE")
    ssl_keyfile: str = setting("", "MMR_KAFKA_SSL_KEYFILE")
    #: Redis credentials (also possible in REDIS_URL: rediss://user:pass@host)
    redis_username: str = setting("", "MMR_REDIS_USERNAME")
    redis_password: Secret = setting(Secret(), "MMR_REDIS_PASSWORD")
    redis_ca_certs: str = setting("", "MMR_REDIS_CA_CERTS")
    redis_cluster: bool | None = setting(None, "MMR_REDIS_CLUSTER")
    redis_min_replicas: int = setting(-1, "MMR_REDIS_MIN_REPLICAS")
    redis_wait_timeout_ms: int = setting(1000, "MMR_REDIS_WAIT_TIMEOUT_MS")
    redis_durable_after_s: float = setting(3.0, "MMR_REDIS_DURABLE_AFTER_S")
    log_level: LogLevel = setting("info", "MMR_LOG_LEVEL")
    log_format: LogFormat = setting("text", "MMR_LOG_FORMAT")
    state_dir: str = setting("", "MMR_STATE_DIR")
    on_rating_bug: OnRatingBug = setting("halt", "MMR_ON_RATING_BUG")

    def __post_init__(self) -> None:
        check_fields(self)
        variables = env_names(Settings)
        for attr, ok, expected in _BOUNDS:
            value = getattr(self, attr)
            if not ok(value):
                raise SettingError(f"{variables[attr]}={value}: expected {expected}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "redis_url")
        return f"Settings(redis_url={mask_url(self.redis_url)!r}, {shown})"

    def secrets(self) -> list[str]:
        """Every secret these settings hold (passwords, and those of ``REDIS_URL``): what logs must not show
        (``stream.redact.install``)."""
        held = [v.get_secret_value() for f in fields(self) if isinstance(v := getattr(self, f.name), Secret)]
        return [s for s in (*held, *url_secrets(self.redis_url)) if s]

    def with_(self, **changes: Any) -> Settings:
        """A copy with ``changes``, checked as a new Settings is."""
        return replace(self, **changes)

    def with_default_system(self, name: str | None, params: Mapping[str, Any] | None) -> Settings:
        """``mmr worker --system/--param``: the default for every pool without its own config."""
        if not name and not params:
            return self
        return replace(self, system=name or self.system, default_params=dict(params or {}))

    def system_for(self, pool: str) -> PoolConfig:
        """The system a new pool is rated with: the pools file's, else the default (``system``,
        ``default_params``). Never the kind of the pool's first event, so every worker, whatever
        reaches it first, fixes the same system (docs/interface.md)."""
        cfg = self.pools.get(pool)
        if cfg is not None:
            return cfg
        return PoolConfig(self.system, dict(self.default_params))

    def input_topics(self) -> tuple[str, str, str]:
        return self.topic_matches, self.topic_rounds, self.topic_results

    def faust_state_dir(self) -> str:
        return self.state_dir or os.path.join(tempfile.gettempdir(), f"mmr-faust-{self.app_id}")

    def to_env(self) -> dict[str, str]:
        """The variables that make ``from_env`` build these settings (for a worker subprocess).

        ``pools`` has no variable of its own (``MMR_POOLS_FILE`` names a file): write one."""
        env: dict[str, str] = {}
        for attr, name in env_names(Settings).items():
            value = getattr(self, attr)
            if isinstance(value, Secret):
                value = value.get_secret_value()
            if value is None:
                value = "auto"
            env[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        if self.default_params:
            env["MMR_PARAMS"] = ",".join(f"{k}={v}" for k, v in self.default_params.items())
        return env

    def ssl_context(self) -> ssl.SSLContext | None:
        if "SSL" not in self.security_protocol:
            return None
        import ssl  # (only for a broker over TLS: ``mmr replay --embedded`` reads this module too)

        ctx = ssl.create_default_context(cafile=self.ssl_cafile or None)
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile or None)
        return ctx

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Security arguments for aiokafka producers/consumers/admin clients."""
        kw: dict[str, Any] = {"security_protocol": self.security_protocol}
        ctx = self.ssl_context()
        if ctx is not None:
            kw["ssl_context"] = ctx
        if "SASL" in self.security_protocol:
            kw.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                      sasl_plain_password=self.sasl_password.get_secret_value())
        return kw

    def replication_kwargs(self) -> dict[str, Any]:
        """RedisStore's ``min_replicas`` (None: auto) and ``wait_timeout_ms``."""
        return {"min_replicas": None if self.redis_min_replicas < 0 else self.redis_min_replicas,
                "wait_timeout_ms": self.redis_wait_timeout_ms}

    def http_bearer_token(self) -> str:
        """The HTTP API's bearer token: MMR_HTTP_TOKEN_FILE's content (stripped), else MMR_HTTP_TOKEN; "" none.
        ``SettingError`` naming the file when it cannot be read or is empty."""
        if self.http_token_file:
            try:
                token = Path(self.http_token_file).read_text().strip()
            except OSError as exc:
                raise SettingError(f"MMR_HTTP_TOKEN_FILE={self.http_token_file}: cannot be read: "
                                   f"{exc.strerror or exc}") from None
            if not token:
                raise SettingError(f"MMR_HTTP_TOKEN_FILE={self.http_token_file}: the file is empty")
            return token
        return self.http_token.get_secret_value()

    def redis_client_name(self, role: str) -> str:
        """The name the worker's Redis connections of ``role`` give themselves (``CLIENT SETNAME``), so that
        ``CLIENT LIST`` tells whose they are: the app id (the consumer group), a slash, the role; what Redis
        refuses in a name (spaces, characters outside printable ASCII) is replaced by ``_``."""
        return re.sub(r"[^!-~]", "_", f"{self.app_id}/{role}")

    def redis_kwargs(self) -> dict[str, Any]:
        kw = {"username": self.redis_username, "password": self.redis_password.get_secret_value(),
              "ssl_ca_certs": self.redis_ca_certs}
        return {k: v for k, v in kw.items() if v}


def load_pools(path: str | Path) -> dict[str, PoolConfig]:
    """A JSON or TOML file: ``{"pools": {"chess": {"system": "cowan", "params": {...}}}}``."""
    p = Path(path)
    data = tomllib.loads(p.read_text()) if p.suffix == ".toml" else json.loads(p.read_text())
    pools = data.get("pools", data)
    out: dict[str, PoolConfig] = {}
    for name, cfg in pools.items():
        if not isinstance(cfg, dict) or "system" not in cfg:
            raise SettingError(f"{path}: pool {name!r} needs a 'system'")
        out[str(name)] = PoolConfig(str(cfg["system"]), dict(cfg.get("params", {})))
    return out


def known_names() -> set[str]:
    """Every ``MMR_*`` (and other) variable the package or its harness reads."""
    return {*env_names(Settings).values(), *env_names(EngineSettings).values(), *file_names(Settings).values(),
            *file_names(EngineSettings).values(), *COMPOSITE_NAMES, *OUTSIDE_NAMES, *REFUSED_NAMES}


_reported: set[str] = set()


def warn_unknown(env: Mapping[str, str] | None = None) -> list[str]:
    """Log a warning for each ``MMR_*`` variable that no setting reads (once per process).

    A misspelt name would otherwise be ignored in silence; returns the unknown names."""
    import difflib

    known = known_names()
    unknown = sorted(n for n in (os.environ if env is None else env) if n.startswith("MMR_") and n not in known)
    for name in unknown:
        if name in _reported:
            continue
        _reported.add(name)
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else ""
        log.warning("%s is not a setting of mmr-stream and is ignored%s (see docs/operator.md)", name, hint)
    return unknown


def from_env(env: Mapping[str, str] | None = None, **defaults: Any) -> Settings:
    """Settings from ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL`` and ``MMR_*`` (see docs/operator.md).

    ``defaults`` replace the built-in default of a setting whose variable is not set (a
    benchmark's own Redis database, say)."""
    e = os.environ if env is None else env
    for name, hint in REFUSED_NAMES.items():
        if e.get(name, "").strip():
            raise SettingError(f"{name} is not read: {hint}")
    warn_unknown(e)
    values = {**defaults, **load(Settings, e)}
    try:
        if e.get("MMR_PARAMS", "").strip():
            values["default_params"] = parse_param_list(e["MMR_PARAMS"])
    except ParamError as exc:
        raise SettingError(str(exc)) from None
    if e.get("MMR_POOLS_FILE", "").strip():
        values["pools"] = load_pools(e["MMR_POOLS_FILE"].strip())
    return Settings(**values)
