"""The one interface every rating system implements.

Why this shape:

* A *belief* is a 1-D ``float64`` array whose layout belongs to the system: arrays gather into
  kernel inputs with one concatenation and pack into bytes with ``tobytes``, so no per-player
  Python objects sit on the hot path.
* Systems are pure (no I/O, no global state): the same object serves the embedded replay, the
  evaluation and the worker, which makes "streaming result == offline replay" testable bit for bit.
* Two kinds of events: a *round* (many players ranked, ties share a rank) and a *batch of matches*
  (1-v-1, exact sequential meaning); a system that is naturally one kind gets the other from the
  defaults below. The engine's batched forms (``stream.ratings.fastpath``) give exactly what these
  methods give; team rounds are optional (docs/teams.md).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, fields
from itertools import pairwise, repeat
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar, cast

import numpy as np
import numpy.typing as npt

from stream.errors import InputError

Belief = npt.NDArray[np.float64]
"""A player's belief: a system-specific 1-D float64 array (never shared between players)."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class RatingError(InputError, ValueError):
    """Invalid input to a rating system (duplicate player, non-finite number, ...): the message
    names the offending player or field; callers add the event and dead-letter it."""


class Rating(NamedTuple):
    """What users see of a belief: the interface's (docs/interface.md) output fields. A NamedTuple:
    immutable like a frozen dataclass and cheaper to build, at one per changed player per batch."""

    rating: float  # the displayed (conservative) rating
    mu: float
    sigma: float
    rounds: int  # events that changed this player


_RowT = TypeVar("_RowT", bound=tuple[Any, ...])


def rows_of_columns(cls: type[_RowT], *columns: Iterable[Any]) -> Iterator[_RowT]:
    """``map(cls, *columns)`` for a NamedTuple ``cls`` given one column per field, built in C
    (``tuple.__new__`` of each zipped row; a NamedTuple's own ``__new__`` is a Python frame per
    row). Stops at the shortest column, as ``map`` does."""
    if len(columns) != len(cls._fields):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} has {len(cls._fields)} fields, {len(columns)} columns given")  # type: ignore[attr-defined]
    return cast("Iterator[_RowT]", map(tuple.__new__, repeat(cls), zip(*columns, strict=False)))


@dataclass(frozen=True)
class Params:
    """Base of every system's parameter dataclass: ``from_mapping`` parses ``--param KEY=VALUE``
    strings (or a pool's config) and rejects unknown keys."""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None = None) -> Params:
        values = dict(values or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise RatingError(
                f"unknown parameter(s) {', '.join(unknown)} for {cls.__qualname__}; known: {', '.join(sorted(known))}"
            )
        kwargs: dict[str, Any] = {}
        for key, raw in values.items():
            default = getattr(cls, key, None) if hasattr(cls, key) else None
            kwargs[key] = _coerce(key, raw, default)
        return cls(**kwargs)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def require(self, checks: Mapping[str, bool]) -> None:
        """Raise ``RatingError`` naming every parameter whose check failed: ``k=inf`` parses, and would
        rate every event into NaN; rejected here, a worker refuses the pool's configuration at start."""
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            shown = ", ".join(f"{k}={getattr(self, k, '?')!r}" for k in bad)
            raise RatingError(f"invalid {type(self).__qualname__} parameter(s): {shown}")


def _coerce(key: str, raw: Any, default: Any) -> Any:
    """Parse a string parameter into the type of its default (bool, int, float, tuple)."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if isinstance(default, bool):
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            value = float(text)
            if math.isnan(value):
                raise ValueError(text)
            return value
        if isinstance(default, tuple):
            return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise RatingError(f"parameter {key}: cannot parse {raw!r}") from exc
    return text


def concat_f64(beliefs: Sequence[Belief], casting: Literal["no", "same_kind"] = "same_kind") -> FloatArray:
    """``np.concatenate(beliefs, dtype=np.float64, casting=casting)``, value for value (and its
    errors), copied while holding the GIL.

    Why: ``np.concatenate`` releases the GIL for every input array of more than a few hundred
    values and must win it back after each one; on the worker's numba thread, while the event
    loop's thread is busy, every win-back waits up to Python's switch interval. One
    ``bytearray.join`` over the arrays' buffers copies everything in one go (writable, like
    ``concatenate``'s result). Anything but 1-D float64 arrays takes ``np.concatenate`` itself."""
    if len(beliefs) and all(type(b) is np.ndarray and b.dtype == np.float64 and b.ndim == 1 for b in beliefs):
        try:
            raw = bytearray().join(beliefs)  # type: ignore[arg-type]
        except (TypeError, BufferError):  # not C-contiguous
            raw = None
        if raw is not None:
            return np.frombuffer(raw, dtype=np.float64)
    out: FloatArray = np.concatenate(beliefs, dtype=np.float64, casting=casting)
    return out


def offsets_of(items: Sequence[Sized]) -> IntArray:
    """Where each item starts in the items' concatenation, and where the last ends."""
    out = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=out[1:])
    return out


def flat_of(beliefs: Sequence[Belief], casting: Literal["no", "same_kind"] = "same_kind",
            ) -> tuple[FloatArray, IntArray] | None:
    """``(concat_f64(beliefs, casting), offsets_of(beliefs))``, or None when they do not concatenate
    into one 1-D array (the per-belief path says why)."""
    try:
        flat = concat_f64(beliefs, casting)
    except (ValueError, TypeError):
        return None
    return (flat, offsets_of(beliefs)) if flat.ndim == 1 else None


_Sliced = TypeVar("_Sliced", np.ndarray, bytes)


def split(flat: _Sliced, offsets: np.ndarray) -> list[_Sliced]:
    """The slices ``flat[offsets[i]:offsets[i + 1]]`` (an array's: views, non-overlapping, so never shared)."""
    bounds = offsets.tolist()
    return [flat[s:e] for s, e in pairwise(bounds)]


def check_team_round(
    n: int, team_of: IntArray | Sequence[int], team_ranks: IntArray | Sequence[int],
    player_weights: FloatArray | Sequence[float] | None,
) -> tuple[IntArray, IntArray, FloatArray]:
    """The arguments of ``rate_team_round`` checked (``RatingError``: team indices not one per
    player or outside ``0..len(team_ranks) − 1``, a team without players, weights not one per
    player in (0, 1], a non-finite rank) and as arrays (int64, int64, float64; weights 1 if None)."""
    index = np.asarray(team_of)
    nteams = len(team_ranks)
    if index.shape != (n,) or (n and index.dtype.kind not in "iu"):
        raise RatingError(f"{n} beliefs but team indices of shape {index.shape}")
    index = index.astype(np.int64)
    if n and (int(index.min()) < 0 or int(index.max()) >= nteams):
        raise RatingError(f"a team index is outside 0..{nteams - 1}")
    if len(np.unique(index)) != nteams:
        raise RatingError("every team needs at least one player")
    pw = np.ones(n) if player_weights is None else np.asarray(player_weights, dtype=np.float64)
    if pw.shape != (n,) or not bool(np.all((pw > 0) & (pw <= 1))):
        raise RatingError("player weights must be one per player, each in (0, 1]")
    ranks = np.asarray(team_ranks)
    if ranks.dtype.kind == "f" and not np.isfinite(ranks).all():
        raise RatingError("ranks contain a non-finite number")
    return index, ranks.astype(np.int64), pw


def team_round(
    beliefs: Sequence[Belief], team_of: IntArray | Sequence[int], team_ranks: IntArray | Sequence[int],
    player_weights: FloatArray | Sequence[float] | None,
) -> tuple[IntArray, IntArray, FloatArray] | None:
    """The preamble of a system's ``rate_team_round``: ``check_team_round``'s arrays, or None when the
    round changes nothing (fewer than two teams, or every team tied)."""
    team_index, ranks, pw = check_team_round(len(beliefs), team_of, team_ranks, player_weights)
    if len(ranks) < 2 or np.all(ranks == ranks[0]):
        return None
    return team_index, ranks, pw


class RatingSystem(ABC):
    """A rating system: beliefs in, beliefs out, no I/O. Subclasses set ``name``, ``params_type`` and
    implement ``new_belief``, ``summary`` and one of ``rate_round`` / ``rate_matches``."""

    name: ClassVar[str]
    params_type: ClassVar[type[Params]]
    #: which events the system is designed for ("rounds", "matches" or both)
    native: ClassVar[frozenset[str]] = frozenset({"rounds", "matches"})

    def __init__(self, params: Params | Mapping[str, Any] | None = None) -> None:
        if isinstance(params, Params):
            self.params = params
        else:
            self.params = self.params_type.from_mapping(params)

    @abstractmethod
    def new_belief(self) -> Belief:
        """The prior of a player never seen before (a fresh array each call)."""

    @abstractmethod
    def summary(self, belief: Belief) -> Rating:
        """Displayed rating, raw mu/sigma and the number of rounds of a belief."""

    def rate_round(
        self,
        beliefs: Sequence[Belief],
        ranks: IntArray,
        time_ms: int,
        weight: float = 1.0,
        perf_ceiling: float = math.inf,
    ) -> list[Belief]:
        """Apply one ranked round: ``ranks[i]`` is player i's rank (1 = best, equal ranks tie); the new
        beliefs in the same order. A round of fewer than two players, or all tied, returns the inputs.
        The default treats a two-player round as a match; multiplayer systems override."""
        if len(beliefs) < 2:
            return list(beliefs)
        if len(beliefs) != 2:
            raise RatingError(f"{self.name} rates only two-player rounds (got {len(beliefs)})")
        ra, rb = int(ranks[0]), int(ranks[1])
        score = 1.0 if ra < rb else 0.0 if ra > rb else 0.5
        return self.rate_matches(
            list(beliefs),
            np.array([0], dtype=np.int64),
            np.array([1], dtype=np.int64),
            np.array([score]),
            np.array([time_ms], dtype=np.int64),
        )

    def rate_team_round(
        self,
        beliefs: Sequence[Belief],
        team_of: IntArray,
        team_ranks: IntArray,
        time_ms: int,
        weight: float = 1.0,
        perf_ceiling: float = math.inf,
        player_weights: FloatArray | None = None,
        team_shift: FloatArray | None = None,
    ) -> list[Belief]:
        """Apply one round ranked by teams: ``beliefs[i]`` belongs to team ``team_of[i]`` (0-based), team t
        finished at ``team_ranks[t]``; ``player_weights[i]`` in (0, 1] is the part of the round player i
        played (all 1 when None); ``team_shift[t]`` the side advantage team t plays with (None: none).
        Systems without a team model refuse (this default)."""
        raise RatingError(f"{self.name} does not rate team rounds (a round with teams)")

    def rate_matches(
        self,
        beliefs: Sequence[Belief],
        a: IntArray,
        b: IntArray,
        scores: FloatArray,
        times_ms: IntArray,
        advantages: FloatArray | None = None,
    ) -> list[Belief]:
        """Apply matches ``(a[m], b[m], scores[m])`` in order, exactly as if one at a time: ``a``/``b``
        index the distinct players ``beliefs``, ``scores[m]`` is A's (1 win, 0.5 draw, 0 loss),
        ``advantages[m]`` the side advantage A plays with (None: none). The default runs each match as
        a two-player round (with an advantage: two teams of one, A's shifted); 1-v-1 systems override."""
        out = list(beliefs)
        for m in range(len(a)):
            ia, ib = int(a[m]), int(b[m])
            s = float(scores[m])
            if s not in (0.0, 0.5, 1.0):
                raise RatingError(f"{self.name} supports only scores 0, 0.5 and 1 (got {s})")
            ranks = np.array([1, 1] if s == 0.5 else ([1, 2] if s == 1.0 else [2, 1]))
            shift = 0.0 if advantages is None else float(advantages[m])
            if shift == 0.0:
                out[ia], out[ib] = self.rate_round([out[ia], out[ib]], ranks, int(times_ms[m]))
            else:
                out[ia], out[ib] = self.rate_team_round([out[ia], out[ib]], np.array([0, 1]), ranks, int(times_ms[m]),
                                                        team_shift=np.array([shift, 0.0]))
        return out

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        """Expected score of A against B (P(A wins) + P(draw)/2) before they play; A plays with
        the side advantage ``advantage`` (performance units, stream.ratings.advantage)."""
        ra, rb = self.summary(a), self.summary(b)
        # Logistic on the Elo scale as a generic fallback; systems override with their model.
        return 1.0 / (1.0 + 10.0 ** ((rb.mu - ra.mu - advantage) / 400.0))

    #: the system's model takes a side advantage (``win_probability``'s ``advantage``, ``rate_matches``'s
    #: ``advantages``, ``rate_team_round``'s ``team_shift``): stream.ratings.advantage
    side_advantage: ClassVar[bool] = False

    def advantage_unit(self) -> float:
        """u: the system's performance scale, the unit of a side advantage's prior sd and drift
        (stream.ratings.advantage): the sd of one performance (a logistic's sd on Elo scales)."""
        return 400.0 / math.log(10.0) * math.pi / math.sqrt(3.0)

    def ranking_score(self, belief: Belief) -> float:
        """The number a predicted ranking sorts by (higher = better). Default: mu."""
        return self.summary(belief).mu
