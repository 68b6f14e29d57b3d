"""Publishing events to the service: ``from stream.client import Publisher`` (docs/publisher.md).

A game server needs only this module: importing it loads neither numba, numpy nor Faust, and changes
no environment variable. Every event goes through the worker's own checks (``stream.events.check``),
so a bad event raises ``InvalidEvent`` naming the field *before* anything is sent. Messages are keyed
by pool, so a pool's events stay in one partition and in order. Event ids make re-publishing harmless
(the worker applies an id once): your own, a digest of the content (``deterministic_ids=True``) or a
random uuid4. The frames ``mmr replay --broker`` publishes live here too.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import orjson
from aiokafka import AIOKafkaProducer

from stream.events.check import InvalidEvent, check_event, check_participants, check_pool, parse_json
from stream.events.model import MatchEvent
from stream.service.config import Settings, from_env

if TYPE_CHECKING:
    from stream.events.model import RoundEvent

__all__ = ["InvalidEvent", "Publisher", "deterministic_id", "match_batch_json", "match_columns_json", "round_json"]

#: Kafka's default ``message.max.bytes`` is 1 MiB (plus framing): ``Publisher.matches`` splits
#: its ``match_columns`` messages below this
DEFAULT_MAX_MESSAGE_BYTES = 1_000_000
#: matches per ``match_columns`` message at most (``mmr replay --broker``'s default batch)
DEFAULT_BATCH = 4096
#: the producer's largest request: a round of many players is one message
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: unacknowledged sends kept before waiting for their acknowledgements
_MAX_PENDING = 1000
_DIGEST_BYTES = 16


# --- frames -----------------------------------------------------------------------------
def round_json(ev: RoundEvent) -> bytes:
    """A decoded round as the ``round`` message: ``teams`` for a team round, else the column form
    (``players``, ``ranks``: about half the bytes of ``standings``)."""
    obj: dict[str, Any] = {"type": "round", "event_id": ev.event_id, "pool": ev.pool, "round_id": ev.round_id,
                           "time": ev.time}
    if ev.teams is None:
        obj["players"] = ev.players
        obj["ranks"] = ev.ranks.tolist()
    else:
        obj["teams"] = _teams_json(ev)
    if ev.weight != 1.0:
        obj["weight"] = ev.weight
    if math.isfinite(ev.perf_ceiling):
        obj["perf_ceiling"] = ev.perf_ceiling
    return orjson.dumps(obj)


def _teams_json(ev: RoundEvent) -> list[dict[str, Any]]:
    """The ``teams`` of a team round as the schema writes them (``weights`` only where one is not 1)."""
    assert ev.teams is not None
    teams: list[dict[str, Any]] = [{"players": [], "rank": int(r)} for r in ev.teams.ranks.tolist()]
    weights: list[list[float]] = [[] for _ in teams]
    for p, t, w in zip(ev.players, ev.teams.team_of.tolist(), ev.teams.weights.tolist(), strict=True):
        teams[t]["players"].append(p)
        weights[t].append(w)
    for team, w in zip(teams, weights, strict=True):
        if any(x != 1.0 for x in w):
            team["weights"] = w
    for team, side in zip(teams, ev.teams.sides or (), strict=False):
        if side is not None:
            team["side"] = side
    return teams


def match_batch_json(pool: str, matches: Sequence[MatchEvent]) -> bytes:
    """The row form: one JSON object per match (``neutral`` where one is)."""
    return orjson.dumps({"type": "match_batch", "pool": pool, "matches": [
        {"event_id": m.event_id, "time": m.time, "a": m.a, "b": m.b, "score": m.score,
         **({"neutral": True} if m.neutral else {})} for m in matches]})


def _match_event(pool: Any, event_id: Any, time: Any, a: Any, b: Any, score: Any, neutral: Any) -> dict[str, Any]:
    """A ``match`` event as the schema writes it (``neutral`` only where it is)."""
    return {"type": "match", "event_id": event_id, "pool": pool, "time": time, "a": a, "b": b, "score": score,
            **({"neutral": True} if neutral else {})}


def match_json(m: MatchEvent) -> bytes:
    """One ``match`` message."""
    return orjson.dumps(_match_event(m.pool, m.event_id, m.time, m.a, m.b, m.score, m.neutral))


def match_columns_json(pool: str, matches: Sequence[MatchEvent]) -> bytes:
    """The column form the publisher sends: about half the bytes of ``match_batch_json`` and a third
    of the worker's decoding cost (a ``neutral`` column only when some match is neutral)."""
    obj: dict[str, Any] = {"type": "match_columns", "pool": pool, "event_id": [m.event_id for m in matches],
                           "time": [m.time for m in matches], "a": [m.a for m in matches],
                           "b": [m.b for m in matches], "score": [m.score for m in matches]}
    neutral = [m.neutral for m in matches]
    if True in neutral:
        obj["neutral"] = neutral
    return orjson.dumps(obj)


def deterministic_id(event: Mapping[str, Any]) -> str:
    """``{type}-{32 hex digits}``: blake2b of the event without ``event_id``, keys sorted: a retried send
    is recognised (two *different* results of the same players at the same millisecond need own ids)."""
    content = {k: v for k, v in event.items() if k != "event_id"}
    digest = hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=_DIGEST_BYTES)
    return f"{event.get('type')}-{digest.hexdigest()}"


def _optional(weight: float | None, perf_ceiling: float | None) -> dict[str, Any]:
    return {k: v for k, v in (("weight", weight), ("perf_ceiling", perf_ceiling)) if v is not None}


# --- the publisher ----------------------------------------------------------------------
class Publisher:
    """An async Kafka publisher of the service's input events:
    ``async with Publisher() as pub: await pub.match("chess", "alice", "bob", 1.0, time=ms)``.

    Topics and security from ``settings`` (default ``from_env()``). Sends are buffered: ``flush`` (and
    leaving the ``async with``) waits for the acknowledgements and raises the first error.
    """

    def __init__(self, bootstrap: str | None = None, *, settings: Settings | None = None,
                 deterministic_ids: bool = False, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 batch: int = DEFAULT_BATCH, create_topics: bool = True) -> None:
        s = settings or from_env()
        self.settings = s if bootstrap is None else replace(s, kafka_bootstrap=bootstrap)
        self.deterministic_ids = deterministic_ids
        self.max_message_bytes = max_message_bytes
        self.batch = batch
        self.create_topics = create_topics
        #: the last offset written per (topic, partition), as of the last ``flush``
        self.offsets: dict[tuple[str, int], int] = {}
        self._producer: AIOKafkaProducer | None = None
        self._pending: list[asyncio.Future[Any]] = []

    def topic_for(self, event_type: str) -> str:
        s = self.settings
        if event_type in ("match", "match_batch", "match_columns"):
            return s.topic_matches
        if event_type == "round":
            return s.topic_rounds
        if event_type in ("round_result", "round_completed"):
            return s.topic_results
        raise InvalidEvent(f"field type: {event_type!r} is not an input event type")

    async def start(self) -> None:
        """Connect (and create the topics unless told not to); ``stream.errors.ConnectError`` names why not."""
        from stream.service.preflight import check_kafka

        await check_kafka(self.settings)
        if self.create_topics:
            from stream.service.topics import ensure_topics

            await ensure_topics(self.settings)
        producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap, linger_ms=5, acks="all",
                                    max_request_size=MAX_REQUEST_BYTES, enable_idempotence=False,
                                    **self.settings.aiokafka_kwargs())
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        if self._producer is None:
            return
        try:
            await self.flush()
        finally:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def __aenter__(self) -> Publisher:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # --- sending ----------------------------------------------------------------------
    async def send_frame(self, topic: str, pool: str, value: bytes) -> None:
        """Send an encoded message keyed by ``pool``, unchecked (frames of decoded events, ``mmr replay --broker``)."""
        if self._producer is None:
            raise RuntimeError("Publisher not started: use `async with Publisher(...)` or `await start()`")
        self._pending.append(await self._producer.send(topic, value, key=pool.encode()))
        if len(self._pending) >= _MAX_PENDING:
            await self.flush()

    async def flush(self) -> dict[tuple[str, int], int]:
        """Wait for every send so far; returns ``offsets``."""
        pending, self._pending = self._pending, []
        for md in await asyncio.gather(*pending):
            key = (md.topic, md.partition)
            self.offsets[key] = max(self.offsets.get(key, -1), md.offset)
        return self.offsets

    def prepare(self, event: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """``(type, event)`` with ids filled in, validated as the worker validates it (raises
        ``InvalidEvent`` naming the field); nothing is sent."""
        etype, obj, _value, _decoded = self._prepare(event)
        return etype, obj

    def _prepare(self, event: Mapping[str, Any]) -> tuple[str, dict[str, Any], bytes, Any]:
        """``(type, event, its bytes, what the checks read of them)``: the bytes go through the worker's
        own checks (``_check``), so the client refuses what the worker dead-letters."""
        obj = dict(event)
        try:
            if obj.get("type") == "match_columns" and "event_id" not in obj:
                ids = self._column_ids(obj)
                if ids is not None:
                    obj["event_id"] = ids
            elif obj.get("type") == "match_batch" and isinstance(obj.get("matches"), list):
                obj["matches"] = [self._with_id({"type": "match", "pool": obj.get("pool")}, m)
                                  for m in obj["matches"]]
            elif obj.get("event_id") is None:
                obj["event_id"] = self._new_id(obj)
            value = orjson.dumps(obj)
        except orjson.JSONEncodeError as exc:
            raise InvalidEvent(f"field event: not JSON ({exc})") from None
        etype, checked = self._check(value)
        return etype, obj, value, checked

    def _check(self, value: bytes) -> tuple[str, Any]:
        """What the worker checks of a message's bytes (``stream.service.planning.decode_message``):
        ``(type, the checked value)``, or InvalidEvent."""
        s = self.settings
        obj = parse_json(value)
        etype, checked = check_event(obj)
        check_pool(obj["pool"], s.pools, obj.get("event_id") if etype != "match_columns" else None)
        if etype == "round":
            check_participants(etype, len(checked.players), checked.team_of is not None, s.max_participants,
                               obj["event_id"])
        elif etype == "round_completed":
            check_participants(etype, checked["participants"], False, s.max_participants, obj["event_id"])
        return etype, checked

    async def send(self, event: Mapping[str, Any]) -> str | list[str]:
        """Validate any input event (a dict as the schemas write it), fill a missing id, and send it to
        its type's topic: its id (a list for batches)."""
        etype, obj, value, _decoded = self._prepare(event)
        await self.send_frame(self.topic_for(etype), obj["pool"], value)
        if etype == "match_batch":
            return [m["event_id"] for m in obj["matches"]]
        eid: str | list[str] = obj["event_id"]
        return eid

    async def _send_one(self, event: Mapping[str, Any]) -> str:
        eid = await self.send(event)
        assert isinstance(eid, str)
        return eid

    async def match(self, pool: str, a: str, b: str, score: float, *, time: int,
                    event_id: str | None = None, neutral: bool = False) -> str:
        """One 1-v-1 result: ``score`` is A's (1 win, 0.5 draw, 0 loss); ``time`` ms since the epoch;
        unless ``neutral``, A is the side that may hold an advantage (home, white; docs/advantage.md)."""
        return await self._send_one(_match_event(pool, event_id, time, a, b, score, neutral))

    async def matches(self, pool: str, matches: Iterable[Mapping[str, Any]]) -> list[str]:
        """Many results of one pool, in order: each ``{"a", "b", "score", "time"}`` (optional ``event_id``,
        ``neutral``), sent as ``match_columns`` messages of at most ``batch`` matches and
        ``max_message_bytes``, every match validated before any is sent."""
        events: list[MatchEvent] = []
        for i, m in enumerate(matches):
            row = _match_event(pool, m.get("event_id"), m.get("time"), m.get("a"), m.get("b"), m.get("score"),
                               m.get("neutral"))
            try:
                _etype, _obj, _value, one = self._prepare(row)
            except InvalidEvent as exc:
                raise InvalidEvent(f"match {i}: {exc.reason}", exc.event_id) from None
            events.append(one)  # a MatchEvent whose ``neutral`` is the row's
        for start in range(0, len(events), self.batch):
            await self._send_columns(pool, events[start:start + self.batch])
        return [m.event_id for m in events]

    async def _send_columns(self, pool: str, events: list[MatchEvent]) -> None:
        value = match_columns_json(pool, events)
        if len(value) > self.max_message_bytes and len(events) > 1:
            half = len(events) // 2
            await self._send_columns(pool, events[:half])
            await self._send_columns(pool, events[half:])
            return
        await self.send_frame(self.settings.topic_matches, pool, value)

    async def round(self, pool: str, round_id: str, *, time: int,
                    standings: Mapping[str, int] | Sequence[Mapping[str, Any]] | None = None,
                    teams: Sequence[Mapping[str, Any]] | None = None, weight: float | None = None,
                    perf_ceiling: float | None = None, event_id: str | None = None) -> str:
        """A whole ranked round (rank 1 best, equal ranks tie): ``standings`` as ``{player: rank}``
        or ``[{"player", "rank"}]``, or ``teams`` as ``[{"players": [...], "rank", "weights"?}]``."""
        obj: dict[str, Any] = {"type": "round", "event_id": event_id, "pool": pool, "round_id": round_id,
                               "time": time}
        if isinstance(standings, Mapping):
            obj["standings"] = [{"player": p, "rank": r} for p, r in standings.items()]
        elif standings is not None:
            obj["standings"] = [dict(s) for s in standings]
        if teams is not None:
            obj["teams"] = [dict(t) for t in teams]
        return await self._send_one({**obj, **_optional(weight, perf_ceiling)})

    async def round_result(self, pool: str, round_id: str, player: str, rank: int, *, time: int,
                           event_id: str | None = None) -> str:
        """One player's result of a round the worker assembles (closed by ``round_completed``)."""
        return await self._send_one({"type": "round_result", "event_id": event_id, "pool": pool, "round_id": round_id,
                                    "time": time, "player": player, "rank": rank})

    async def round_completed(self, pool: str, round_id: str, participants: int, *, time: int,
                              weight: float | None = None, perf_ceiling: float | None = None,
                              event_id: str | None = None) -> str:
        """Closes a round: it is rated once ``participants`` results are in."""
        return await self._send_one({"type": "round_completed", "event_id": event_id, "pool": pool,
                                    "round_id": round_id, "time": time, "participants": participants,
                                    **_optional(weight, perf_ceiling)})

    def _column_ids(self, obj: Mapping[str, Any]) -> list[str] | None:
        """The ids of a ``match_columns`` event that has none, each its match's as a ``match`` (None when
        the columns are not lists: the validator reports it)."""
        names = ("time", "a", "b", "score", "neutral") if "neutral" in obj else ("time", "a", "b", "score")
        if not all(isinstance(obj.get(k), list) for k in names):
            return None
        cols: list[list[Any]] = [obj[k] for k in names]
        n = len(cols[1])
        for name, col in zip(names, cols, strict=True):
            if len(col) != n:
                raise InvalidEvent(f"field {name}: {len(col)} items, but a has {n}")
        if len(cols) == 4:
            cols.append([False] * n)
        return [self._new_id(_match_event(obj.get("pool"), None, t, a, b, sc, neu is True))
                for t, a, b, sc, neu in zip(*cols, strict=True)]

    def _with_id(self, head: dict[str, Any], m: Any) -> Any:
        """A ``match_batch`` item with its id filled in (anything but a dict is left to the validator)."""
        if not isinstance(m, Mapping) or m.get("event_id") is not None:
            return m
        row = {k: v for k, v in m.items() if k != "event_id"}
        return {"event_id": self._new_id({**head, **row}), **row}

    def _new_id(self, event: Mapping[str, Any]) -> str:
        return deterministic_id(event) if self.deterministic_ids else str(uuid.uuid4())
