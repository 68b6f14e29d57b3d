"""Prometheus metrics of the worker (served on ``/metrics`` by stream.service.http).

One private registry so that tests can build several processors in one interpreter
without "duplicated timeseries" errors from the global default registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from stream.ratings.advantage import Advantages

#: series of ``mmr_side_advantage`` at most (pools × sides): a pool has a few sides, but a worker may rate
#: many pools; past this, new (pool, side) pairs are not shown (their values are in ``GET /pools/{pool}``)
MAX_ADVANTAGE_SERIES = 1000


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events_in = Counter("mmr_events_in", "Input events by type", ["type"], registry=r)
        self.messages_in = Counter("mmr_messages_in", "Input messages by topic", ["topic"], registry=r)
        self.duplicates = Counter("mmr_duplicates", "Events skipped because already applied", registry=r)
        self.batches = Counter("mmr_batches", "Per-pool atomic commits", ["kind"], registry=r)
        self.conflicts = Counter("mmr_commit_conflicts", "Commits retried after a concurrent write", registry=r)
        self.step_seconds = Histogram(
            "mmr_step_seconds", "Per Redis step of a pool, by phase: rate (its rating on the numba thread, from "
            "its hand-over to its result) and commit (a commit that landed, "
            "from its sending to its reply). A pool's commits run one after another, each beside the next "
            "step's rating: over a long replay the larger of the two sums is what bounds it",
            ["phase"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.batch_latency = Histogram(
            "mmr_batch_seconds", "Take batch processing time (decode, read, rate, commit, publish)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.batch_messages = Histogram(
            "mmr_batch_messages", "Input messages per processed batch (take batches merged while the worker was busy)",
            buckets=(1, 4, 16, 64, 256, 1024, 4096, 16384), registry=r)
        self.input_age = Histogram(
            "mmr_input_age_seconds", "Age of each batch's oldest input message when the batch's ratings are handed "
            "to the producer (now minus its Kafka record timestamp): how long after the game server produced an "
            "event its ratings were published, including any backlog",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300), registry=r)
        self.stage = Histogram(
            "mmr_stage_seconds", "Per take batch, the time spent in each stage of the worker, in order: fetched "
            "(its oldest record's Kafka timestamp to the agent: producer batching, the broker, the consumer's fetch, "
            "the take window), queued (waiting for the batches before it), rated (decode, Redis read, rating, Redis "
            "commit), published (ratings handed to the producer in input order, until the broker acked them)",
            ["stage"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5,
                                5, 10), registry=r)
        self.inflight = Gauge("mmr_inflight_messages", "Messages taken from Kafka and not yet acknowledged",
                              registry=r)
        self.dead_letters = Counter("mmr_dead_letters", "Events sent to the dead-letter topic", ["reason"],
                                    registry=r)
        self.messages_done = Counter("mmr_messages_done", "Input messages fully handled (committed, published)",
                                     registry=r)
        self.done_at = Gauge("mmr_messages_done_timestamp_seconds", "Unix time at which input messages were last "
                             "fully handled (committed, published): how stale the ratings topic may be when the "
                             "worker stops finishing batches", registry=r)
        self.ratings_out = Counter("mmr_ratings_out", "Rating messages published", registry=r)
        self.lag = Gauge("mmr_consumer_lag", "Highwater minus next offset to read", ["topic", "partition"],
                         registry=r)
        self.pending_rounds = Gauge("mmr_pending_rounds", "Rounds being assembled from round_result events",
                                    registry=r)
        self.store_unavailable = Gauge(
            "mmr_store_unavailable", "1 while the worker's batches find Redis unavailable (unreachable, timing out, "
            "a failover, replicas not confirming): the batch is retried with back-off and fetching of the assigned "
            "input partitions is paused; 0 once a batch commits again", registry=r)
        self.store_retries = Counter(
            "mmr_store_retries", "Attempts at a batch that found Redis unavailable (each is retried, never "
            "dead-lettered)", registry=r)
        self.fetch_paused = Gauge("mmr_fetch_paused_partitions", "Assigned input partitions whose fetching is "
                                  "paused because Redis is unavailable", registry=r)
        self.advantage = Gauge(
            "mmr_side_advantage", "The learned side advantage of a pool's side (its mean, in the performance units "
            "of the pool's system: docs/advantage.md), as this worker last committed it", ["pool", "side"],
            registry=r)
        self._advantage_series: set[tuple[str, str]] = set()
        self.id_index_bytes = Gauge("mmr_applied_ids_index_bytes", "Memory of the worker's index of applied event "
                                    "ids (the digests of its pools' :ids logs, stream.state.id_index)", registry=r)

    def set_advantages(self, pool: str, stored: Mapping[str, bytes]) -> None:
        """``mmr_side_advantage`` of the sides a commit of ``pool`` wrote (``Advantages.stored`` bytes);
        at most ``MAX_ADVANTAGE_SERIES`` series in all."""
        for side, raw in stored.items():
            key = (pool, side)
            if key not in self._advantage_series:
                if len(self._advantage_series) >= MAX_ADVANTAGE_SERIES:
                    continue
                self._advantage_series.add(key)
            self.advantage.labels(pool, side).set(Advantages.decode(raw).mean)

    def count_from(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """A counter kept elsewhere (read when scraped), e.g. by a process-wide patch of Faust."""
        self.registry.register(_ReadCounter(name, doc, read))


class _ReadCounter(Collector):
    def __init__(self, name: str, doc: str, read: Callable[[], float]) -> None:
        self.name, self.doc, self.read = name, doc, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.doc, value=self.read())


#: the kinds of dead-letter reasons, by the reason's first words: the ``reason`` label of
#: ``mmr_dead_letters_total`` is one of these or "other", so the series stay few whatever the input
#: (the reason itself, with its field path, pool or player, is in the dead letter)
REASON_KINDS = (("bad JSON", "json"), ("an event must be a JSON object", "json"), ("field ", "field"),
                ("unknown pool", "unknown_pool"), ("pool config", "pool_config"), ("rating", "rating"),
                ("round ", "round"), ("too large", "too_large"), ("internal", "internal"))
REASON_LABELS = frozenset(label for _, label in REASON_KINDS) | {"other"}


def reason_label(reason: str) -> str:
    """The kind of a dead-letter reason ("field matches.1829.a: ..." -> "field"): one of ``REASON_LABELS``."""
    for start, label in REASON_KINDS:
        if reason.startswith(start):
            return label
    return "other"
