"""A take batch decoded and grouped: per pool, the ops to apply in message order.

A run of consecutive match messages of a pool is one ``MatchOp`` (one kernel call), a round
is one ``RoundOp``; ``round_result``/``round_completed`` are set aside for the round book
(stream.service.round_book), which turns a completed round into a ``RoundOp``. An event on an
input topic that does not take its type is dead-lettered (``TopicRule``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from typing import Any

import numpy as np

from stream.events.check import check_participants, check_pool
from stream.events.model import MatchBatch, PlayerIndex, RoundEvent, index_players
from stream.events.validate import (
    MATCH_LISTS,
    InvalidEvent,
    decode_event,
    fast_matches,
    fast_round,
    parse_json,
)
from stream.ratings.base import IntArray
from stream.service.config import Settings
from stream.service.messages import BatchResult, DeadLetter, Message, peek_event
from stream.service.metrics import Metrics


@dataclass(slots=True)
class RoundOp:
    event: RoundEvent
    msg: Message
    extra_ids: list[str] = field(default_factory=list)  # result ids of an assembled round
    round_done: str | None = None  # round id to mark done with the commit (assembled rounds)


@dataclass(slots=True)
class MatchOp:
    batch: MatchBatch
    msgs: list[Message]  # per match
    sources: list[Message]  # the distinct messages, in order
    index: PlayerIndex | None = None  # built once the batch is final (after merging)

    def add(self, batch: MatchBatch, msg: Message) -> None:
        """Append the matches of one more message: consecutive match messages of a pool are one kernel
        call. Safe because every system's ``rate_matches`` has exact sequential meaning, its stored form
        included (tests/unit/engine/test_replay_embedded.py: batch_size=1 == batch_size=4096)."""
        self.batch.extend(batch)
        self.msgs += [msg] * len(batch)
        self.sources.append(msg)


Op = RoundOp | MatchOp
DeadFn = Callable[..., DeadLetter]


#: the event types each input topic takes (docs/interface.md, "Events and topics"): one sent to another
#: topic would be rated out of order with its pool's events there, so it is dead-lettered with a reason
#: naming the topic it belongs on (a topic configured for several kinds takes each one's types)
MATCH_TYPES = ("match", "match_batch", "match_columns")
ROUND_TYPES = ("round",)
RESULT_TYPES = ("round_result", "round_completed")


class TopicRule:
    """The types each input topic takes, and where each type belongs."""

    def __init__(self, matches: str, rounds: str, results: str) -> None:
        self.takes: dict[str, frozenset[str]] = {}
        self.home: dict[str, str] = {}
        for topic, types in ((matches, MATCH_TYPES), (rounds, ROUND_TYPES), (results, RESULT_TYPES)):
            self.takes[topic] = self.takes.get(topic, frozenset()) | frozenset(types)
            self.home.update(dict.fromkeys(types, topic))

    def misplaced(self, topic: str, etype: str) -> str | None:
        """The dead letter's reason for an event of type ``etype`` read from ``topic``; None when it belongs there."""
        takes = self.takes.get(topic)
        if takes is None or etype in takes:
            return None
        return (f"field type: a {etype!r} event on topic {topic!r}, which takes {', '.join(sorted(takes))} only; "
                f"send it to {self.home[etype]!r}")


@lru_cache(maxsize=8)
def topic_rule(matches: str, rounds: str, results: str) -> TopicRule:
    """The rule of these input topics (``Settings.input_topics()``), built once."""
    return TopicRule(matches, rounds, results)


@dataclass(slots=True)
class Plan:
    """One take batch decoded and grouped (``plan_batch``)."""

    t0: float
    n_msgs: int
    out: BatchResult = field(default_factory=BatchResult)  # dead letters of invalid messages
    ops: dict[str, list[Op]] = field(default_factory=dict)
    results: dict[str, list[tuple[str, dict[str, Any], Message]]] = field(default_factory=dict)
    topics: dict[str, int] = field(default_factory=dict)  # messages per input topic
    types: dict[str, int] = field(default_factory=dict)  # valid events per type


def decode_message(msg: Message, settings: Settings) -> tuple[str, Any]:
    """``(type, value)`` of a valid message: matches of any form as one MatchBatch, a round as a
    RoundEvent, round results/completions as dicts. Raises InvalidEvent."""
    etype: str
    value: Any
    obj = parse_json(msg.value)
    batch = fast_matches(obj)
    if batch is not None:  # the hot path: a valid match/match_batch straight into columns
        check_pool(batch.pool, settings.pools, obj.get("event_id"))
        return obj["type"], batch
    fast = fast_round(obj)  # a plain round: its standings checked by columns
    etype, value = ("round", fast) if fast is not None else decode_event(obj)
    pool, eid = obj["pool"], obj.get("event_id")
    check_pool(pool, settings.pools, eid)
    if etype == "match" or etype in MATCH_LISTS:  # unusual but valid (e.g. an integral float time): same columns
        batch = MatchBatch(pool)
        for m in [value] if etype == "match" else value:
            batch.add(m)
        return etype, batch
    if etype == "round":
        check_participants(etype, len(value.players), value.teams is not None, settings.max_participants,
                           value.event_id)
    if etype == "round_completed":
        check_participants(etype, obj["participants"], False, settings.max_participants, obj["event_id"])
    return etype, value


def plan_batch(msgs: list[Message], settings: Settings, metrics: Metrics | None, dead: DeadFn) -> Plan:
    """Decode and group one take batch: ops per pool (message order kept), round results per
    pool, and the dead letters of invalid messages. A message's ``decoded`` is consumed (a
    retry decodes it again). Its messages are counted in ``metrics`` (None: not counted)."""
    plan = Plan(time.perf_counter(), len(msgs))
    out, ops, results = plan.out, plan.ops, plan.results
    topics, types = plan.topics, plan.types
    rules = topic_rule(*settings.input_topics())
    for msg in msgs:
        topics[msg.topic] = topics.get(msg.topic, 0) + 1
        decoded, msg.decoded = msg.decoded, None
        try:
            if decoded is None:
                decoded = decode_message(msg, settings)
            elif isinstance(decoded, InvalidEvent):
                raise decoded
            etype, value = decoded
        except InvalidEvent as exc:
            out.dead.append(dead(msg, exc.reason, exc.event_id, peek_event(msg.value)[0]))
            continue
        misplaced = rules.misplaced(msg.topic, etype)
        if misplaced is not None:
            pool, event_id = peek_event(msg.value)
            out.dead.append(dead(msg, misplaced, event_id, pool))
            continue
        types[etype] = types.get(etype, 0) + 1
        if etype == "match" or etype in MATCH_LISTS:
            batch: MatchBatch = value
            if etype != "match":
                types["match"] = types.get("match", 0) + len(batch)
            pool_ops = ops.setdefault(batch.pool, [])
            prev = pool_ops[-1] if pool_ops else None
            if isinstance(prev, MatchOp):
                prev.add(batch, msg)
            else:
                pool_ops.append(MatchOp(batch, [msg] * len(batch), [msg]))
        elif etype == "round":
            ops.setdefault(value.pool, []).append(RoundOp(value, msg))
        else:
            results.setdefault(value["pool"], []).append((etype, value, msg))
    if metrics is not None:  # one labelled inc per batch, not per message: a labelled inc is slow
        for topic, n in topics.items():
            metrics.messages_in.labels(topic).inc(n)
        for etype, n in types.items():
            metrics.events_in.labels(etype).inc(n)
    return plan


def split_steps(ops: list[Op], max_players: int) -> list[list[Op]]:
    """``ops`` cut into runs that each touch at most ``max_players`` distinct players (a run ends before
    the op that would pass it; one op alone may pass it). Why: a Redis step reads and writes every player
    it touches while Redis runs nothing else, and players, not input bytes, are its cost."""
    if max_players <= 0 or sum(len(op.event.players) if isinstance(op, RoundOp) else 2 * len(op.batch)
                                for op in ops) <= max_players:
        return [ops]
    steps: list[list[Op]] = [[]]
    seen: set[str] = set()
    for op in ops:
        names = _names(op)
        seen.update(names)  # one pass: the op's new players counted by what the set grew
        if steps[-1] and len(seen) > max_players:
            steps.append([])
            seen = set(names)
        steps[-1].append(op)
    if len(steps) > 1:
        steps[-2:] = _halved(steps[-2] + steps[-1], max_players) or steps[-2:]
    return steps


def _names(op: Op) -> Sequence[str]:
    return op.event.players if isinstance(op, RoundOp) else [*op.batch.a, *op.batch.b]


def _halved(ops: list[Op], max_players: int) -> list[list[Op]] | None:
    """The last two steps' ``ops`` cut where the first part reaches half their players, when both parts
    stay within ``max_players``; else None. Why: cut greedily, the last step is whatever is left, and
    the worker rates each step while the one before commits, so a short last step left the kernels'
    thread waiting behind a long commit (BENCHMARKS.md, "Service")."""
    seen: set[str] = set()
    grown: list[int] = []  # grown[j]: the players of ops[: j + 1]
    for op in ops:
        seen.update(_names(op))
        grown.append(len(seen))
    k = next(j for j, g in enumerate(grown, 1) if 2 * g >= grown[-1])  # ops in the first part
    if k == len(ops) or grown[k - 1] > max_players:
        return None
    if len(set(chain.from_iterable(map(_names, ops[k:])))) > max_players:
        return None
    return [ops[:k], ops[k:]]


class _Numbering(dict[str, int]):
    """Player → place: looking up a player not numbered yet numbers them (the next place)."""

    __slots__ = ()

    def __missing__(self, player: str) -> int:
        place = self[player] = len(self)
        return place


@dataclass(slots=True)
class StepInputs:
    """One step's ops and what its read, rating and commit need of them."""

    ops: list[Op]
    kind: str  # "rounds" or "matches": which engine of the pool rates them
    ids: list[str]  # event ids the step records
    #: every player the step touches → their place (0, 1, ... in the order first named)
    players: dict[str, int]
    offsets: dict[str, tuple[int | None, int]]  # see Commit.offsets
    rounds: list[str]  # ids of assembled rounds the commit marks done
    #: per op, the places of its players in ``players`` (a round's, in its order; None for a match op)
    at: list[IntArray | None]


def step_inputs(ops: list[Op]) -> StepInputs:
    """``ops`` (one step, in order) with their ids, players, offsets and assembled rounds, and where
    each round names its players among the step's (``StepInputs.at``). Why the places: every
    player-round is hashed here anyway, and numbering them spares the numba thread, which bounds the
    worker's run, a look-up by name of each (BENCHMARKS.md, "Service")."""
    ids: list[str] = []
    at: list[IntArray | None] = []
    offsets: dict[str, tuple[int | None, int]] = {}
    rounds: list[str] = []
    numbering = _Numbering()
    place = numbering.__getitem__  # (C-level for a player numbered already)
    for op in ops:
        if isinstance(op, RoundOp):
            ids.append(op.event.event_id)
            names = op.event.players
            at.append(np.fromiter(map(place, names), dtype=np.int64, count=len(names)))
            note_offset(offsets, op.msg)
            if op.round_done is not None:
                rounds.append(op.round_done)
        else:
            ids.extend(op.batch.event_ids)
            op.index = index_players(op.batch)
            deque(map(place, op.index.players), maxlen=0)
            at.append(None)
            for msg in op.sources:
                note_offset(offsets, msg)
    kind = "rounds" if isinstance(ops[0], RoundOp) else "matches"
    return StepInputs(ops, kind, ids, dict(numbering), offsets, rounds, at)


def note_offset(offsets: dict[str, tuple[int | None, int]], msg: Message) -> None:
    """Record ``msg`` in the batch's offsets per topic/partition (see Commit.offsets): the highest
    advances the pool's watermark; the first is never checked (events are recognised by id)."""
    tp = f"{msg.topic}/{msg.partition}"
    first, last = offsets.get(tp, (None, msg.offset))
    offsets[tp] = (first, max(last, msg.offset))
