"""Applying rounds and match batches of one pool to stored beliefs: one path per operation.

``rate_round`` / ``rate_matches`` rate decoded beliefs with the system's own methods (the
oracle of every faster form below). The embedded replay calls them through ``store_round`` /
``store_matches`` on what its store holds; the worker through ``apply_round`` /
``apply_matches`` on encoded bytes (what Redis holds), which also return the new ratings to
publish. The faster forms, each bit for bit its oracle (docs/ARCHITECTURE.md, "Fast paths and
their oracles"): an Elo-MMR pool's rounds on packed beliefs gathered from one arena (the
embedded store's ``PackedPool``, a worker step's ``TaggedPool``); a Cowan pool's matches in
place in the embedded store's arena. The per-player work around the kernels (decode, encode,
summaries) runs as one batched call each, which gives exactly the per-player results.

Every new belief passes through ``canonical`` (``decode(encode(b))`` for a lossy codec, ``b``
itself for a lossless one or for beliefs that are fixed points of their codec, as Cowan's), so
the embedded store holds exactly what a round trip through Redis would give back.

Stored state the engine cannot use (a value in Redis that is truncated, of another system,
or holds zeros, NaN or huge numbers) raises ``RatingError`` from every entry point, whatever
the codec or kernel raised, and so does a rating that would come out non-finite: the service
dead-letters the event with that reason and keeps rating every other player, instead of
stopping on the same event after every restart. A team round goes to the system's
``rate_team_round`` on decoded beliefs; a system without a team model refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import cast

import numpy as np

from stream.events.model import MatchBatch, PlayerIndex, RoundEvent, index_players
from stream.ratings import sided
from stream.ratings.advantage import AdvantageParams, Advantages
from stream.ratings.base import Belief, FloatArray, IntArray, Rating, RatingError, RatingSystem
from stream.ratings.codec import Codec, Float64Codec, codec_for
from stream.ratings.fastpath import Arena, ArenaMatches, PackedRounds, RoundChange, fast_path
from stream.ratings.team_scores import TeamPredictor, team_predictor
from stream.state.memory import Held
from stream.state.packed_pool import FlatBeliefs, PackedPool
from stream.state.tagged_pool import TaggedPool

#: what codecs and kernels raise on a belief they cannot use (``RatingError`` is a ValueError:
#: it passes through unchanged); numba re-raises a kernel's exception as ``SystemError``
_BELIEF_FAULTS = (ArithmeticError, ValueError, IndexError, SystemError)


@contextmanager
def _belief_faults(system: str) -> Iterator[None]:
    """Turn a codec's or kernel's failure on stored beliefs into ``RatingError``."""
    try:
        yield
    except RatingError:
        raise
    except _BELIEF_FAULTS as exc:
        raise RatingError(f"{system} cannot rate the stored beliefs ({type(exc).__name__}: {exc})") from exc


_RATING, _SIGMA = itemgetter(0), itemgetter(2)  # Rating fields, read at C level

#: bytes of decoded beliefs one PoolEngine (one pool) keeps (``PoolEngine.decoded_budget``): ~3-6k
#: Cowan players, which covers the active players of a live pool between two of their matches
DECODED_BUDGET = 16 << 20


def _check_finite(ratings: dict[str, Rating]) -> None:
    """Refuse ratings that are not finite (a corrupt belief's NaN would be stored and then
    published as JSON null). One C-level sum per field: NaN and inf propagate."""
    values = ratings.values()
    if math.isfinite(sum(map(_RATING, values)) + sum(map(_SIGMA, values))):
        return
    bad = next((p for p, r in ratings.items() if not (math.isfinite(r.rating) and math.isfinite(r.sigma))), None)
    if bad is not None:  # else: finite values whose sum overflowed
        raise RatingError(f"the new rating of player {bad!r} is not finite (a corrupt stored belief?)")


def _finite(change: RoundChange) -> bool:
    """Whether every rating and σ of ``change`` is finite (otherwise the per-belief path runs, and
    ``_check_finite`` names the player)."""
    return bool(np.isfinite(change.rating).all()) and bool(np.isfinite(change.sigma).all())


@dataclass(slots=True)
class Applied:
    """What one batch changes: new encoded beliefs and the players' new ratings, whose ``rounds`` is
    the per-player output version (0: only registered, ``PoolEngine._changed``: not published)."""

    #: (a ``FlatBeliefs`` of a step's arena: ``apply_round`` on a ``TaggedPool``)
    updates: Mapping[str, bytes] = field(default_factory=dict)
    ratings: dict[str, Rating] = field(default_factory=dict)
    #: a round's change by columns (``apply_round(..., columns=True)`` where the packed path can
    #: give it): ``ratings`` is then left empty, the new ratings are these columns
    change: RoundChange | None = None


class PoolConfigError(RatingError):
    """A pool's system, as fixed in its stored meta by another version, cannot be built by this one: the
    worker dead-letters the pool's events (``pool config: ...``) and rates its other pools."""


class PoolEngine:
    """One pool's rating system plus its codec; pure (no I/O)."""

    @classmethod
    def from_meta(cls, pool: str, system: str, params: Mapping[str, object]) -> PoolEngine:
        """The engine of a pool whose system was fixed in stored meta (``PoolConfigError`` if refused)."""
        try:
            built, advantage = sided.make_pool_system(system, params)
        except (ValueError, TypeError) as exc:  # RatingError is a ValueError
            shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
            raise PoolConfigError(f"pool {pool!r}: its stored system {system} ({shown or 'defaults'}) is "
                                  f"refused by this version: {exc}") from exc
        return cls(pool, built, advantage=advantage)

    @classmethod
    def of_params(cls, pool: str, system: str, params: Mapping[str, object] | None) -> PoolEngine:
        """The engine of a pool of ``system`` with ``params`` (the system's and the ``advantage*`` keys)."""
        built, advantage = sided.make_pool_system(system, params)
        return cls(pool, built, advantage=advantage)

    def __init__(self, pool: str, system: RatingSystem, codec: Codec | None = None,
                 advantage: AdvantageParams | None = None) -> None:
        self.pool = pool
        self.system = system
        #: the side advantage's settings (the pool's ``advantage*`` parameters)
        self.advantage = AdvantageParams() if advantage is None else advantage
        #: the pool's sided events rate and learn with the advantage (else they rate as neutral)
        self.takes_sides = sided.takes_sides(system, self.advantage)
        #: the pool's learned advantages, changed by every sided event this engine rates: the embedded
        #: replay's own state; a worker's step first sets them to what it read from Redis (``load_advantages``)
        self.advantages: Advantages = sided.new_advantages(system, self.advantage)
        self._predictor: TeamPredictor | None = None
        self.codec = codec if codec is not None else codec_for(system.name)
        self.fast = fast = fast_path(system)
        #: the system's beliefs come back from the store as they are (a lossless codec, or
        #: beliefs that are fixed points of the codec): no round trip through the codec
        self.exact_store = self.codec.lossless or fast.canonical_state
        #: the embedded store holds this pool's beliefs *packed* (each one's raw float64 bytes)
        #: when the system rates rounds on packed beliefs and its codec keeps every bit: no
        #: numpy array is made or freed per player and round (BENCHMARKS.md, "Elo-MMR")
        self.packed = isinstance(fast, PackedRounds) and self.exact_store
        #: the embedded store holds each player's slot in a pool-wide arena (``ArenaMatches``, Cowan),
        #: made on first use
        self.arena_store = isinstance(fast, ArenaMatches) and self.exact_store
        self._arena: Arena | None = None
        #: the last stored bytes of recently rated players with their decoded beliefs, so a player who
        #: comes back is not decoded again. Only for beliefs that are fixed points of their codec
        #: (``canonical_state``): what a batch returns *is* what its bytes decode to. Checked by the
        #: bytes themselves, so it never answers for other bytes (another writer, a failed commit).
        self.decoded_budget = DECODED_BUDGET if fast.canonical_state else 0
        self._decoded: dict[str, tuple[bytes, Belief]] = {}
        self._decoded_bytes = 0

    def canonical(self, belief: Belief) -> Belief:
        """The belief as it comes back from the store (no round trip when the system's
        beliefs are already fixed points of its codec: ``exact_store``)."""
        if self.exact_store:
            return belief
        return self.codec.decode(self.codec.encode(belief))

    def _changed(self, players: list[str], before: list[Belief], after: list[Belief],
                 known: Mapping[str, Belief]) -> dict[str, Belief]:
        """The players whose belief the event changed, plus those ``known`` (the store) did not hold yet:
        an event that changes nothing still makes its players part of the pool, at their prior with
        ``rounds`` 0, so the final ratings list every player who took part (none is published)."""
        # (the system returns an unchanged player's very object)
        moved = {p: new for p, old, new in zip(players, before, after, strict=True) if new is not old or p not in known}
        if self.exact_store:  # the hot path: no call per player
            return moved
        codec = self.codec
        back = codec.decode_many(codec.encode_many(list(moved.values())))
        return dict(zip(moved, back, strict=True))

    # --- the side advantage (stream.ratings.sided) -------------------------------------
    def sided_round(self, event: RoundEvent) -> bool:
        """Whether the round rates with the pool's advantages (a team round with sides, a pool that takes them)."""
        return self.takes_sides and event.teams is not None and event.teams.sides is not None

    def sided_matches(self, batch: MatchBatch) -> bool:
        """Whether a match of the batch rates with the pool's advantage (one not neutral, a pool that takes it)."""
        return self.takes_sides and (batch.neutral is None or not all(batch.neutral))

    def load_advantages(self, stored: Mapping[bytes, bytes] | Mapping[str, bytes]) -> None:
        """The pool's advantages as stored (``Advantages.stored``): what a worker's step read."""
        self.advantages = self.advantages.load(stored)

    def team_predictor(self) -> TeamPredictor:
        """The team model the advantage of a round of two teams is learned with (``sided.rate_team_round``)."""
        if self._predictor is None:
            self._predictor = team_predictor(self.system)
        return self._predictor

    # --- decoded beliefs: the oracles -----------------------------------------------
    def rate_round(self, event: RoundEvent, beliefs: Mapping[str, Belief]) -> dict[str, Belief]:
        """New beliefs of the players the round changed (duplicates were rejected upstream). A team
        round with sides rates with the pool's advantages and, of two teams, learns them."""
        new = self.system.new_belief
        before = [b if (b := beliefs.get(p)) is not None else new() for p in event.players]
        teams = event.teams
        if teams is None:
            after = self.system.rate_round(before, event.ranks, event.time, event.weight, event.perf_ceiling)
        elif self.sided_round(event):
            assert teams.sides is not None
            adv = self.advantages.copy()  # kept only once the round is rated
            after = sided.rate_team_round(self.system, adv, before, teams.team_of, teams.ranks, event.time,
                                          event.weight, event.perf_ceiling, teams.weights, teams.sides,
                                          self.team_predictor)
            changed = self._changed(event.players, before, after, beliefs)
            self.advantages = adv
            return changed
        else:
            after = self.system.rate_team_round(before, teams.team_of, teams.ranks, event.time, event.weight,
                                                event.perf_ceiling, teams.weights)
        return self._changed(event.players, before, after, beliefs)

    def rate_matches(self, batch: MatchBatch, beliefs: Mapping[str, Belief],
                     index: PlayerIndex | None = None) -> dict[str, Belief]:
        """New beliefs after a batch of matches, with exact sequential meaning (sided ones: ``_rate_sided``);
        ``index``: the batch's ``index_players``, when the caller built it already."""
        idx = index if index is not None else index_players(batch)
        new = self.system.new_belief
        before = [x if (x := beliefs.get(p)) is not None else new() for p in idx.players]
        if self.sided_matches(batch):
            after = self._rate_sided(batch, idx, before)
        else:
            after = self.system.rate_matches(before, idx.a, idx.b, batch.score_array(), batch.time_array())
        return self._changed(idx.players, before, after, beliefs)

    def _rate_sided(self, batch: MatchBatch, idx: PlayerIndex, before: list[Belief]) -> list[Belief]:
        """A batch holding matches that are not neutral, in order: each run of neutral matches by the
        batch kernel (as a batch without sides), each other match alone with the pool's advantage, which
        it then teaches (``sided.rate_match``). The same beliefs and advantages however the matches
        are cut into batches. ``self.advantages`` changes only once every match is rated."""
        adv = self.advantages.copy()
        cur = list(before)
        a_of, b_of = idx.a.tolist(), idx.b.tolist()
        place = dict(zip(idx.players, range(len(idx.players)), strict=True))
        neutral = batch.neutral_flags()
        system = self.system
        scores, times = batch.scores, batch.times
        i, n = 0, len(batch)
        while i < n:
            if neutral[i]:
                j = i
                while j < n and neutral[j]:
                    j += 1
                part = batch.slice(i, j)  # rated as a batch of its own would be
                part_idx = index_players(part)
                places = [place[p] for p in part_idx.players]
                out = system.rate_matches([cur[k] for k in places], part_idx.a, part_idx.b,
                                          part.score_array(), part.time_array())
                for k, belief in zip(places, out, strict=True):
                    cur[k] = belief
                i = j
                continue
            ia, ib = a_of[i], b_of[i]
            cur[ia], cur[ib] = sided.rate_match(system, adv, cur[ia], cur[ib], scores[i], times[i])
            i += 1
        self.advantages = adv
        return cur

    # --- what the embedded store holds (packed bytes or arrays: ``packed``) ------------
    def unpack(self, held: Held) -> Belief:
        """A belief the embedded store holds, as an array."""
        if isinstance(held, int):
            return self._arena_of().beliefs(np.array([held], dtype=np.int64))[0]
        return np.frombuffer(held, dtype="<f8").astype(np.float64) if isinstance(held, bytes) else held

    def unpack_many(self, held: Sequence[Held]) -> list[Belief]:
        """``unpack`` of each; arena slots all at once (one gather instead of one per slot)."""
        if held and all(isinstance(h, int) for h in held):
            return self._arena_of().beliefs(np.array(held, dtype=np.int64))
        return [self.unpack(h) for h in held]

    @cached_property
    def prior_rating(self) -> Rating:
        """The summary of the system's prior (a newcomer's), as ``summary_many`` gives it: made once
        (a Cowan prior is a belief on the whole grid)."""
        return self.fast.summary_many([self.system.new_belief()])[0]

    def summary_many_held(self, held: Sequence[Held]) -> list[Rating]:
        """``fast.summary_many(unpack_many(held))``; arena slots summarised from the arena's
        block of them (``ArenaMatches.summary_arena``), without a belief array per slot."""
        fast = self.fast
        if held and isinstance(fast, ArenaMatches) and all(isinstance(h, int) for h in held):
            return fast.summary_arena(self._arena_of(), np.array(held, dtype=np.int64))
        return fast.summary_many(self.unpack_many(held))

    def _arena_of(self) -> Arena:
        if self._arena is None:
            assert isinstance(self.fast, ArenaMatches)
            self._arena = self.fast.new_arena()
        return self._arena

    def _arena_put(self, changed: Mapping[str, Belief], held: Mapping[str, Held]) -> dict[str, Held]:
        """``changed`` written into the arena: existing players' slots in place, new players
        appended; what the embedded store holds next (their slots)."""
        arena = self._arena_of()
        out: dict[str, Held] = {}
        fresh = []
        for p, belief in changed.items():
            slot = held.get(p)
            if isinstance(slot, int):
                arena.set(slot, belief)
                out[p] = slot
            else:
                out[p] = -1
                fresh.append((p, belief))
        if fresh:
            slots = arena.add([b for _, b in fresh]).tolist()
            out.update(zip([p for p, _ in fresh], slots, strict=True))
        return out

    def _held_form(self, changed: dict[str, Belief], held: Mapping[str, Held]) -> Mapping[str, Held]:
        """New beliefs as the embedded store holds them: slots of the pool's arena, packed bytes, or arrays."""
        if self.arena_store:
            return self._arena_put(changed, held)
        if self.packed:
            return {p: np.asarray(b, dtype="<f8").tobytes() for p, b in changed.items()}
        return changed

    def _unpacked(self, players: Iterable[str], held: Mapping[str, Held]) -> dict[str, Belief]:
        return {p: self.unpack(h) for p in players if (h := held.get(p)) is not None}

    def store_round(self, event: RoundEvent, held: Mapping[str, Held]) -> Mapping[str, Held]:
        """``rate_round`` on what the embedded store holds; returns what it should hold next."""
        return self._store_round(event, held, change=False)[0]

    def store_round_change(self, event: RoundEvent, held: Mapping[str, Held]
                           ) -> tuple[Mapping[str, Held], RoundChange | None]:
        """``store_round``, and the round's change by columns where the pool's arena rates it (read from
        the very values the kernel read and wrote); None where another path rates the round, or a summary
        is not finite: the caller then explains it player by player (``stream.engine.explain``)."""
        return self._store_round(event, held, change=True)

    def _store_round(self, event: RoundEvent, held: Mapping[str, Held], change: bool,
                     ) -> tuple[Mapping[str, Held], RoundChange | None]:
        with _belief_faults(self.system.name):  # (team rounds have no packed kernel: through arrays)
            if self.packed and isinstance(held, PackedPool) and event.teams is None:
                return self._store_round_dense(event, held, change)
            if not (self.packed or self.arena_store):
                return self.rate_round(event, cast("Mapping[str, Belief]", held)), None  # the store holds arrays
            return self._held_form(self.rate_round(event, self._unpacked(event.players, held)), held), None

    def _rate_gathered(self, event: RoundEvent, pool: PackedPool, idx: IntArray, change: bool,
                       ) -> tuple[FloatArray, IntArray, RoundChange | None] | None:
        """The round gathered from ``pool`` by index (−1: the prior) and rated by the packed kernel:
        the new values, their offsets and, with ``change``, the change by columns (None: not by
        columns, or not finite); None when the round changes nothing. The same kernel on the same
        values as the per-belief path: the same bits."""
        fast = cast(PackedRounds, self.fast)
        flat, offsets = pool.gather(idx, np.frombuffer(fast.new_packed_belief(), dtype="<f8"))
        result = fast.rate_round_gathered(flat, offsets, event.ranks, event.time, event.weight, event.perf_ceiling)
        if result is None:
            return None
        cols = fast.change_gathered(flat, offsets, *result) if change else None  # before ``flat`` is reused
        return *result, cols if cols is not None and _finite(cols) else None

    def _store_round_dense(self, event: RoundEvent, held: PackedPool, change: bool,
                           ) -> tuple[Mapping[str, Held], RoundChange | None]:
        """A round of a pool held in one arena: gathered by index, its output block handed back
        whole (``FlatBeliefs``), so neither way makes a ``bytes`` per player."""
        players = event.players
        idx = held.indices(players)
        rated = self._rate_gathered(event, held, idx, change)
        if rated is None:  # changes nothing: newcomers are stored at the prior (``_changed``)
            prior = cast(PackedRounds, self.fast).new_packed_belief()
            return {p: prior for p, i in zip(players, idx.tolist(), strict=True) if i < 0}, None
        values, offsets, cols = rated
        return FlatBeliefs(players, idx, values, offsets, held), cols

    def store_matches(self, batch: MatchBatch, held: Mapping[str, Held]) -> Mapping[str, Held]:
        """``rate_matches`` on what the embedded store holds: in place in a pool-wide arena (Cowan's,
        but for sided matches), else through arrays (only rounds have a packed kernel)."""
        with _belief_faults(self.system.name):
            if self.arena_store and not self.sided_matches(batch):
                return self._store_matches_arena(cast(ArenaMatches, self.fast), batch, held)
            if not (self.packed or self.arena_store):
                return self.rate_matches(batch, cast("Mapping[str, Belief]", held))
            idx = index_players(batch)
            return self._held_form(self.rate_matches(batch, self._unpacked(idx.players, held), idx), held)

    def _store_matches_arena(self, fast: ArenaMatches, batch: MatchBatch,
                             held: Mapping[str, Held]) -> dict[str, Held]:
        """``store_matches`` in the pool's arena: new players start at the prior, every
        player's slot is rated in place (no belief array per player)."""
        arena = self._arena_of()
        idx = index_players(batch)
        n = len(idx.players)
        # ``held.get(p, -1)`` for each player by ``map`` (C speed, no generator frame per player)
        slots = np.fromiter(map(held.get, idx.players, repeat(-1, n)), dtype=np.int64, count=n)
        fresh = np.flatnonzero(slots < 0)
        if fresh.size:
            slots[fresh] = arena.add_copies(self.system.new_belief(), fresh.size)
        fast.rate_arena(arena, slots, idx.a, idx.b, batch.score_array())
        return dict(zip(idx.players, slots.tolist(), strict=True))

    # --- encoded beliefs (the Redis path) -------------------------------------------
    def decode_all(self, stored: Mapping[str, bytes | None], players: list[str],
                   remember: bool = True) -> dict[str, Belief]:
        """The stored beliefs of ``players`` (absent ones left out), decoded in one batch (bytes last
        seen come from ``_decoded``). ``remember=False`` only reads ``_decoded``: for callers on another
        thread than the worker's numba thread, whose updates would race with the batches'."""
        present = [(p, raw) for p in players if (raw := stored.get(p)) is not None]
        if not self.decoded_budget:
            return self._decode_present(present)
        known = self._decoded
        out: dict[str, Belief] = {}
        todo = []
        for p, raw in present:
            hit = known.get(p)
            if hit is not None and hit[0] == raw:
                out[p] = hit[1]
            else:
                todo.append((p, raw))
        if todo:
            fresh = self._decode_present(todo)
            if remember:
                self._remember(zip(fresh, [raw for _, raw in todo], fresh.values(), strict=True))
            out.update(fresh)
        return out

    def _decode_present(self, present: list[tuple[str, bytes]]) -> dict[str, Belief]:
        try:
            beliefs = self.codec.decode_many([raw for _, raw in present])
        except _BELIEF_FAULTS:
            for p, raw in present:  # name the player whose stored value is not a belief
                try:
                    self.codec.decode(raw)
                except _BELIEF_FAULTS as exc:
                    raise RatingError(f"the stored value of player {p!r} is not a {self.system.name} belief "
                                      f"({type(exc).__name__}: {exc})") from exc
            raise
        return {p: b for (p, _), b in zip(present, beliefs, strict=True)}

    def _remember(self, rows: Iterable[tuple[str, bytes, Belief]]) -> None:
        """Keep (bytes, decoded belief) per player; all dropped once over the budget."""
        known = self._decoded
        size = self._decoded_bytes
        for p, raw, belief in rows:
            old = known.get(p)
            if old is not None:
                size -= old[1].nbytes
            known[p] = (raw, belief)
            size += belief.nbytes
        if size > self.decoded_budget:
            known.clear()
            size = 0
        self._decoded_bytes = size

    def _encode(self, changed: dict[str, Belief]) -> Applied:
        players = list(changed)
        beliefs = list(changed.values())
        ratings = dict(zip(players, self.fast.summary_many(beliefs), strict=True))
        _check_finite(ratings)
        encoded = self.codec.encode_many(beliefs)
        if self.decoded_budget:
            self._remember(zip(players, encoded, beliefs, strict=True))
        return Applied(updates=dict(zip(players, encoded, strict=True)), ratings=ratings)

    @property
    def decoded_bytes(self) -> int:
        """Bytes of decoded beliefs kept (``decode_all``), at most ``decoded_budget``."""
        return self._decoded_bytes

    @property
    def rounds_packed(self) -> bool:
        """Whether a step's rounds without teams are rated in one arena (``held_rounds``)."""
        return self.packed and isinstance(self.codec, Float64Codec)

    def apply_round(self, event: RoundEvent, stored: Mapping[str, bytes | None], columns: bool = False,
                    at: IntArray | None = None) -> Applied:
        """Rate one round on encoded beliefs; returns encoded updates and new ratings (with
        ``columns``, as ``Applied.change`` instead where the packed path can give them). ``at``:
        the players' places in the step's order, for a step's arena (``held_rounds``) that knows it."""
        with _belief_faults(self.system.name):
            fast = self._apply_round_held(event, stored, at) if isinstance(stored, TaggedPool) and columns else None
            if fast is not None:
                return fast
            return self._encode(self.rate_round(event, self.decode_all(stored, event.players)))

    def held_rounds(self, stored: Mapping[str, bytes | None], order: Mapping[str, int] | None = None,
                    ) -> TaggedPool | None:
        """``stored`` as a step of rounds rates it in one arena (``TaggedPool``, ``apply_round(...,
        columns=True)``), for a pool whose rounds take the packed path (None otherwise). ``order``: the
        step's players → their places, by which its rounds' players are then found (``apply_round``'s ``at``)."""
        if not self.rounds_packed:
            return None
        # the byte every value starts with: the encoding of a belief of no values
        return TaggedPool(stored, self.codec.encode(np.empty(0, dtype=np.float64)), order)

    def encode_held(self, held: TaggedPool, players: Sequence[str], idx: IntArray | None = None) -> list[bytes]:
        """``held[p]`` of each of ``players`` (each rated there; ``idx``: their indices in its arena, if
        known), byte for byte, written from its arena in one pass."""
        flat, offsets = held.encoded(players, idx)
        return cast(Float64Codec, self.codec).encode_flat(flat, offsets)

    def _apply_round_held(self, event: RoundEvent, held: TaggedPool, at: IntArray | None = None) -> Applied | None:
        """``apply_round`` with ``columns`` on a step's arena, as ``_store_round_dense`` (its new beliefs a
        ``FlatBeliefs`` with the store's tag, which ``held.update`` takes in one copy). None for anything
        else, decided by the per-belief path then, including every error (nothing is written)."""
        if event.teams is not None:
            return None
        idx = held.indices(event.players, at)
        if idx is None:
            return None
        try:
            rated = self._rate_gathered(event, held.pool, idx, change=True)
        except RatingError:
            return None
        if rated is None or rated[2] is None:  # (changes nothing: the per-belief path stores newcomers)
            return None
        values, offsets, change = rated
        return Applied(updates=FlatBeliefs(event.players, idx, values, offsets, held.pool, held.tag, at), change=change)

    def apply_matches(self, batch: MatchBatch, stored: Mapping[str, bytes | None],
                      index: PlayerIndex | None = None) -> Applied:
        """Rate a batch of matches on encoded beliefs (exact sequential meaning)."""
        idx = index if index is not None else index_players(batch)
        with _belief_faults(self.system.name):
            return self._encode(self.rate_matches(batch, self.decode_all(stored, idx.players), idx))

    def rating_of(self, player: str, raw: bytes) -> Rating:
        """The rating the stored value of ``player`` holds (``RatingError`` when it is not a belief)."""
        with _belief_faults(self.system.name):
            r = self.system.summary(self.decode_all({player: raw}, [player], remember=False)[player])
            _check_finite({player: r})
            return r
