"""Service configuration: environment variables (12-factor) plus an optional pools file.

Everything the worker, the publisher, the exporter and the benchmark need is read here,
once, into a frozen dataclass, so tests can build a configuration without touching
``os.environ`` and docs/service.md has one place to stay in sync with.
"""

from __future__ import annotations

import json
import os
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEFAULT_ROUNDS_SYSTEM = "elo-mmr"
DEFAULT_MATCHES_SYSTEM = "cowan"
DEDUP_MODES = ("ids", "offsets")


@dataclass(frozen=True)
class PoolConfig:
    system: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str = "127.0.0.1:9092"
    redis_url: str = "redis://127.0.0.1:6379/0"
    app_id: str = "mmr-stream"
    topic_matches: str = "mmr-matches"
    topic_rounds: str = "mmr-rounds"
    topic_results: str = "mmr-round-results"
    topic_ratings: str = "mmr-ratings"
    topic_dead: str = "mmr-dead-letters"
    partitions: int = 4
    replication: int = 1
    key_prefix: str = "mmr"
    take_max: int = 4096  # messages per take batch
    take_within: float = 0.02  # seconds a take batch waits for more messages
    max_inflight: int = 16384  # messages taken but not yet acked (back-pressure of the batch pipeline)
    max_inflight_bytes: int = 4 << 20  # ... and their bytes (see stream.service.pipeline)
    max_merge_bytes: int = 2 << 20  # queued take batches are merged up to this many input bytes
    #: distinct players of one Redis step: a batch touching more is applied as several steps
    #: (stream.service.processor._steps); 0: no limit
    max_step_players: int = 50_000
    belief_cache_mb: int = 256  # worker-side copy of the beliefs it wrote (stream.state.cache); 0 disables
    #: bytes of one record batch of the ratings producer (Faust's producer_max_batch_size,
    #: 16 KiB by default). aiokafka keeps one batch per partition waiting and sends one request
    #: per broker at a time, so 16 KiB (~80 ratings) per partition per round trip capped the
    #: worker near 16k ratings/s on Tansu. Keep it below the broker's ``message.max.bytes``
    producer_batch_bytes: int = 256 * 1024
    #: largest request the producer sends (Faust's producer_max_request_size); a larger dead
    #: letter is retried until it fits (never skipped: see stream.service.app.Service.deliver_dead)
    producer_max_request_bytes: int = 1_000_000
    fetch_max_wait_ms: int = 10  # consumer long-poll (Faust hard-codes 1500; see faust_patches.patch_fetch_wait)
    #: deliver fetched messages to the agent inline when nothing waits (faust_patches.patch_inline_delivery)
    inline_delivery: bool = True
    numba_threads: int = 0  # threads of numba's parallel kernels on the worker's numba thread; 0: numba's default
    #: Python's GIL switch interval in the worker, ms (``sys.setswitchinterval``; 0: Python's
    #: default of 5). See ``stream.service.worker.tune_gil``
    gil_switch_ms: float = 1.0
    round_timeout_s: float = 300.0  # round_result assembly timeout
    max_participants: int = 100_000
    #: how re-delivered matches are recognised: "ids" (every event id is recorded; also catches a
    #: producer that sends an event twice) or "offsets" (the pool's highest applied offset per
    #: topic/partition; bounded state and ~1.3 µs less Redis CPU per match, but an event sent twice
    #: at two offsets is applied twice). Rounds and round results are always recognised by id.
    dedup: str = "ids"
    #: bound of a pool's recorded event ids (``:ids`` kept in two generations of this many; see
    #: stream.state.redis_store): an event re-sent after this many newer ids is applied again.
    #: 0: every id is kept for ever (exact, unbounded memory)
    seen_max_ids: int = 0
    #: rate a match-only batch while the previous batch's Redis commit is in flight (from the
    #: beliefs that commit writes; recomputed when it does not land as computed). Opt-in: on
    #: this machine it made the worker slower, because batches merge less (see
    #: stream.service.processor, "Overlapped commits", and BENCHMARKS.md).
    overlap_commits: bool = False
    http_host: str = "127.0.0.1"
    http_port: int = 0  # 0: any free port (the bound port is logged and served by /healthz)
    rounds_system: str = DEFAULT_ROUNDS_SYSTEM
    matches_system: str = DEFAULT_MATCHES_SYSTEM
    default_params: dict[str, Any] = field(default_factory=dict)
    pools: dict[str, PoolConfig] = field(default_factory=dict)
    # Kafka security
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl_mechanism: str = "PLAIN"  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    # Redis security (also possible in REDIS_URL: rediss://user:pass@host)
    redis_username: str = ""
    redis_password: str = ""
    redis_ca_certs: str = ""
    log_level: str = "info"

    def __post_init__(self) -> None:
        if self.dedup not in DEDUP_MODES:
            raise ValueError(f"MMR_DEDUP={self.dedup!r}: expected one of {', '.join(DEDUP_MODES)}")
        if self.seen_max_ids < 0:
            raise ValueError(f"MMR_SEEN_MAX_IDS={self.seen_max_ids}: expected 0 (unbounded) or a positive count")
        if self.max_step_players < 0:
            raise ValueError(f"MMR_MAX_STEP_PLAYERS={self.max_step_players}: expected 0 (no limit) or a positive count")
        if not 0 <= self.gil_switch_ms < 1000:
            raise ValueError(f"MMR_GIL_SWITCH_MS={self.gil_switch_ms}: expected 0 (Python's default) or a positive "
                             "number of milliseconds below 1000")

    def with_default_system(self, name: str | None, params: Mapping[str, Any] | None) -> Settings:
        """``mmr worker --system/--param``: the default for every pool without its own config."""
        if not name and not params:
            return self
        return replace(
            self,
            rounds_system=name or self.rounds_system,
            matches_system=name or self.matches_system,
            default_params=dict(params or {}) if name or params else self.default_params,
        )

    def system_for(self, pool: str, kind: str) -> PoolConfig:
        """Configured system of a pool; for an unconfigured pool the default of its first event kind."""
        cfg = self.pools.get(pool)
        if cfg is not None:
            return cfg
        name = self.rounds_system if kind == "rounds" else self.matches_system
        return PoolConfig(name, dict(self.default_params))

    def input_topics(self) -> tuple[str, str, str]:
        return self.topic_matches, self.topic_rounds, self.topic_results

    # --- client arguments --------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext | None:
        if "SSL" not in self.security_protocol.upper():
            return None
        ctx = ssl.create_default_context(cafile=self.ssl_cafile or None)
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile or None)
        return ctx

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Security arguments for aiokafka producers/consumers/admin clients."""
        kw: dict[str, Any] = {"security_protocol": self.security_protocol.upper()}
        ctx = self.ssl_context()
        if ctx is not None:
            kw["ssl_context"] = ctx
        if "SASL" in kw["security_protocol"]:
            kw.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                      sasl_plain_password=self.sasl_password)
        return kw

    def redis_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self.redis_username:
            kw["username"] = self.redis_username
        if self.redis_password:
            kw["password"] = self.redis_password
        if self.redis_ca_certs:
            kw["ssl_ca_certs"] = self.redis_ca_certs
        return kw


def load_pools(path: str | Path) -> dict[str, PoolConfig]:
    """A JSON or TOML file: ``{"pools": {"chess": {"system": "cowan", "params": {...}}}}``."""
    p = Path(path)
    data = tomllib.loads(p.read_text()) if p.suffix == ".toml" else json.loads(p.read_text())
    pools = data.get("pools", data)
    out: dict[str, PoolConfig] = {}
    for name, cfg in pools.items():
        if not isinstance(cfg, dict) or "system" not in cfg:
            raise ValueError(f"{path}: pool {name!r} needs a 'system'")
        out[str(name)] = PoolConfig(str(cfg["system"]), dict(cfg.get("params", {})))
    return out


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from ``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL`` and ``MMR_*`` (see docs/service.md)."""
    e = dict(os.environ if env is None else env)

    def get(name: str, default: Any) -> Any:
        raw = e.get(name)
        if raw is None or raw == "":
            return default
        if default is None:
            return raw
        return type(default)(raw) if not isinstance(default, bool) else raw.lower() in ("1", "true", "yes")

    s = Settings()
    default_params: dict[str, Any] = {}
    raw_params = e.get("MMR_PARAMS", "")
    for pair in filter(None, (x.strip() for x in raw_params.split(","))):
        k, _, v = pair.partition("=")
        default_params[k.strip()] = v.strip()
    pools_file = e.get("MMR_POOLS_FILE", "")
    return Settings(
        kafka_bootstrap=get("KAFKA_BOOTSTRAP_SERVERS", s.kafka_bootstrap),
        redis_url=get("REDIS_URL", s.redis_url),
        app_id=get("MMR_APP_ID", s.app_id),
        topic_matches=get("MMR_TOPIC_MATCHES", s.topic_matches),
        topic_rounds=get("MMR_TOPIC_ROUNDS", s.topic_rounds),
        topic_results=get("MMR_TOPIC_ROUND_RESULTS", s.topic_results),
        topic_ratings=get("MMR_TOPIC_RATINGS", s.topic_ratings),
        topic_dead=get("MMR_TOPIC_DEAD_LETTERS", s.topic_dead),
        partitions=get("MMR_PARTITIONS", s.partitions),
        replication=get("MMR_REPLICATION", s.replication),
        key_prefix=get("MMR_KEY_PREFIX", s.key_prefix),
        take_max=get("MMR_TAKE_MAX", s.take_max),
        take_within=get("MMR_TAKE_WITHIN", s.take_within),
        max_inflight=get("MMR_MAX_INFLIGHT", s.max_inflight),
        max_inflight_bytes=get("MMR_MAX_INFLIGHT_BYTES", s.max_inflight_bytes),
        max_merge_bytes=get("MMR_MAX_MERGE_BYTES", s.max_merge_bytes),
        max_step_players=get("MMR_MAX_STEP_PLAYERS", s.max_step_players),
        belief_cache_mb=get("MMR_BELIEF_CACHE_MB", s.belief_cache_mb),
        fetch_max_wait_ms=get("MMR_FETCH_MAX_WAIT_MS", s.fetch_max_wait_ms),
        producer_batch_bytes=get("MMR_PRODUCER_BATCH_BYTES", s.producer_batch_bytes),
        producer_max_request_bytes=get("MMR_PRODUCER_MAX_REQUEST_BYTES", s.producer_max_request_bytes),
        inline_delivery=get("MMR_INLINE_DELIVERY", s.inline_delivery),
        numba_threads=get("MMR_NUMBA_THREADS", s.numba_threads),
        gil_switch_ms=get("MMR_GIL_SWITCH_MS", s.gil_switch_ms),
        round_timeout_s=get("MMR_ROUND_TIMEOUT", s.round_timeout_s),
        max_participants=get("MMR_MAX_PARTICIPANTS", s.max_participants),
        dedup=get("MMR_DEDUP", s.dedup),
        seen_max_ids=get("MMR_SEEN_MAX_IDS", s.seen_max_ids),
        overlap_commits=get("MMR_OVERLAP_COMMITS", s.overlap_commits),
        http_host=get("MMR_HTTP_HOST", s.http_host),
        http_port=get("MMR_HTTP_PORT", s.http_port),
        rounds_system=get("MMR_SYSTEM", None) or get("MMR_ROUNDS_SYSTEM", s.rounds_system),
        matches_system=get("MMR_SYSTEM", None) or get("MMR_MATCHES_SYSTEM", s.matches_system),
        default_params=default_params,
        pools=load_pools(pools_file) if pools_file else {},
        security_protocol=get("MMR_KAFKA_SECURITY_PROTOCOL", s.security_protocol),
        sasl_mechanism=get("MMR_KAFKA_SASL_MECHANISM", s.sasl_mechanism),
        sasl_username=get("MMR_KAFKA_SASL_USERNAME", s.sasl_username),
        sasl_password=get("MMR_KAFKA_SASL_PASSWORD", s.sasl_password),
        ssl_cafile=get("MMR_KAFKA_SSL_CAFILE", s.ssl_cafile),
        ssl_certfile=get("MMR_KAFKA_SSL_CERTFILE", s.ssl_certfile),
        ssl_keyfile=get("MMR_KAFKA_SSL_KEYFILE", s.ssl_keyfile),
        redis_username=get("MMR_REDIS_USERNAME", s.redis_username),
        redis_password=get("MMR_REDIS_PASSWORD", s.redis_password),
        redis_ca_certs=get("MMR_REDIS_CA_CERTS", s.redis_ca_certs),
        log_level=get("MMR_LOG_LEVEL", s.log_level),
    )

