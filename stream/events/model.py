"""Decoded, validated events: what the engine consumes, from files and from Kafka alike.

Records are built by keyword: a field added later cannot shift the others. The module imports
without numpy (``stream.client`` builds ``MatchEvent`` records without loading it); the helpers that
make arrays import it when called, which the engine has done long before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple

import orjson

from stream.events.schema import limits

if TYPE_CHECKING:
    from stream.ratings.base import FloatArray, IntArray

#: ``maxLength`` of a player id in the schemas
MAX_ID_LENGTH = limits().player_length


@dataclass(frozen=True, slots=True, kw_only=True)
class Teams:
    """The teams of a team round, parallel to its ``players`` (listed team by team): ``team_of[i]`` is the
    team (0-based) of ``players[i]``, ``ranks[t]`` the rank of team t, ``weights[i]`` the part of the
    round ``players[i]`` played, in (0, 1]; ``sides[t]`` team t's ``side`` label (``sides`` None: none has one)."""

    team_of: IntArray
    ranks: IntArray
    weights: FloatArray
    sides: tuple[str | None, ...] | None = None


@dataclass(slots=True, kw_only=True)
class RoundEvent:
    """One ranked round: ``players[i]`` finished at ``ranks[i]`` (1 = best, equal = tie). A team round also
    carries ``teams`` (``ranks[i]``: the rank of ``players[i]``'s team), rated by ``rate_team_round``."""

    event_id: str
    pool: str
    round_id: str
    time: int  # ms since epoch
    players: list[str]
    ranks: IntArray
    weight: float = 1.0
    perf_ceiling: float = math.inf
    teams: Teams | None = None


@dataclass(slots=True, kw_only=True)
class MatchEvent:
    """One 1-v-1 result: ``score`` is A's score (1 win, 0.5 draw, 0 loss); unless ``neutral``, A
    is the side that may hold an advantage (home, white, first to move)."""

    event_id: str
    pool: str
    time: int
    a: str
    b: str
    score: float
    neutral: bool = False


@dataclass(slots=True)
class MatchBatch:
    """Consecutive matches of one pool, applied with exact sequential meaning. ``MatchBatch(pool)`` is an
    empty batch; its columns are given by name. ``neutral[m]``: match m is neutral (no side holds an
    advantage); None when none is (every decoder gives None then, so batches of the same matches are
    equal whichever decoder built them)."""

    pool: str
    _: KW_ONLY
    event_ids: list[str] = field(default_factory=list)
    a: list[str] = field(default_factory=list)
    b: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    neutral: list[bool] | None = None

    def add(self, m: MatchEvent) -> None:
        if m.neutral or self.neutral is not None:
            if self.neutral is None:
                self.neutral = [False] * len(self.a)
            self.neutral.append(m.neutral)
        self.event_ids.append(m.event_id)
        self.a.append(m.a)
        self.b.append(m.b)
        self.scores.append(m.score)
        self.times.append(m.time)

    def extend(self, other: MatchBatch) -> None:
        """Append ``other``'s matches after these (same pool): one batch, the same sequential meaning."""
        if self.neutral is not None or other.neutral is not None:
            self.neutral = self.neutral_flags() + other.neutral_flags()
        self.event_ids += other.event_ids
        self.a += other.a
        self.b += other.b
        self.scores += other.scores
        self.times += other.times

    def __len__(self) -> int:
        return len(self.a)

    def neutral_flags(self) -> list[bool]:
        """``neutral`` of every match (a new list)."""
        return [False] * len(self.a) if self.neutral is None else list(self.neutral)

    def is_neutral(self, m: int) -> bool:
        return self.neutral is not None and self.neutral[m]

    def event(self, m: int) -> MatchEvent:
        """Match ``m`` as an event."""
        return MatchEvent(event_id=self.event_ids[m], pool=self.pool, time=self.times[m], a=self.a[m], b=self.b[m],
                          score=self.scores[m], neutral=self.is_neutral(m))

    def slice(self, i: int, j: int) -> MatchBatch:
        """Matches ``i`` to ``j`` (excluded) as a batch of their own."""
        return MatchBatch(self.pool, event_ids=self.event_ids[i:j], a=self.a[i:j], b=self.b[i:j],
                          scores=self.scores[i:j], times=self.times[i:j],
                          neutral=None if self.neutral is None else self.neutral[i:j])

    def score_array(self) -> FloatArray:
        import numpy as np

        return np.asarray(self.scores, dtype=np.float64)

    def time_array(self) -> IntArray:
        import numpy as np

        return np.asarray(self.times, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class MatchRun:
    """Consecutive ``match`` lines of one file and pool, read and checked as columns
    (``read_records(..., chunks=True)``), with each one's line number for a "file:line"."""

    batch: MatchBatch
    path: str
    lines: list[int]

    def __len__(self) -> int:
        return len(self.batch)

    def where(self, i: int) -> str:
        """The "file:line" of match ``i``."""
        return f"{self.path}:{self.lines[i]}"

    def events(self) -> list[MatchEvent]:
        """The matches one at a time."""
        b = self.batch
        return [b.event(m) for m in range(len(b))]


@dataclass(frozen=True, slots=True)
class PlayerIndex:
    """A batch's players (in first-appearance order over the ``a`` column, then ``b``) and each match's
    two positions among them. Built once per batch (``index_players``) and shared by the Redis read,
    the kernels and the outputs: building it costs about as much as the ``elo`` kernel itself."""

    players: list[str]
    a: IntArray
    b: IntArray

    def last_match(self) -> IntArray:
        """For each player, the position of their last match in the batch."""
        import numpy as np

        n = len(self.a)
        last = np.full(len(self.players), -1, dtype=np.int64)
        pos = np.arange(n, dtype=np.int64)
        np.maximum.at(last, self.a, pos)
        np.maximum.at(last, self.b, pos)
        return last


def index_players(batch: MatchBatch) -> PlayerIndex:
    """The ``PlayerIndex`` of ``batch`` (dict and map passes at C speed)."""
    import numpy as np

    players = list(dict.fromkeys(chain(batch.a, batch.b)))
    index = dict(zip(players, range(len(players)), strict=True))
    n = len(batch)
    get = index.__getitem__
    a = np.fromiter(map(get, batch.a), dtype=np.int64, count=n)
    b = np.fromiter(map(get, batch.b), dtype=np.int64, count=n)
    return PlayerIndex(players, a, b)


Event = RoundEvent | MatchEvent


class RatingOutput(NamedTuple):
    """The interface's (docs/interface.md) output ``rating`` event (one per changed player per batch); a
    NamedTuple, as ``Rating``, because it is several times cheaper to build than a dataclass.
    ``explain``: the fields that explain the change (``stream.engine.explain``), added to the message
    as they are; the worker carries them as JSON text, encoded once (``rating_value``)."""

    pool: str
    player: str
    rating: float
    mu: float
    sigma: float
    rounds: int
    version: int
    event_id: str
    time: int
    system: str
    explain: Mapping[str, object] | bytes | None = None

    def as_dict(self) -> dict[str, object]:
        out = self.contract_dict()
        if self.explain is not None:
            out.update(orjson.loads(self.explain) if isinstance(self.explain, bytes) else self.explain)
        return out

    def contract_dict(self) -> dict[str, object]:
        """The interface's (docs/interface.md) fields (``as_dict`` without the explanation)."""
        return {"type": "rating", "pool": self.pool, "player": self.player, "rating": self.rating, "mu": self.mu,
                "sigma": self.sigma, "rounds": self.rounds, "version": self.version, "event_id": self.event_id,
                "time": self.time, "system": self.system}


def rating_key(pool: str, player: str) -> bytes:
    """Output key: unambiguous for any pool/player strings; compaction keeps the last per player."""
    return orjson.dumps([pool, player])


def rating_value(o: RatingOutput) -> bytes:
    """The rating message: ``orjson.dumps(o.as_dict())``, byte for byte; an explanation carried as JSON
    text is spliced in as it is (neither decoded nor encoded again)."""
    x = o.explain
    if isinstance(x, bytes) and len(x) > 2:
        return orjson.dumps(o.contract_dict())[:-1] + b"," + x[1:]
    return orjson.dumps(o.as_dict())
