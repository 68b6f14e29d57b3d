"""The side advantage of a pool, learned online, shared by every rating system (docs/advantage.md).

A pool has one advantage per side: ``MATCH_SIDE`` for the first player (``a``) of a non-neutral
match, and one per ``side`` label of team rounds. A side's advantage ``h`` (performance units of the
pool's system) enters the model where a skill does, so it moves the prediction and the update
alike: winning at home moves ratings less, because a home win was expected more.

Learning rule (derived in docs/advantage.md, "The learning rule"): each side's advantage is a
Gaussian belief ``N(m, v)`` that drifts by ``drift·u²`` before each event of its side (u: the
system's performance unit, ``RatingSystem.advantage_unit``) and takes one Laplace step (an extended
Kalman filter) of the outcome's likelihood under the system's own probability ``p(x)`` that the
first side finishes ahead with relative advantage ``x = h_a − h_b``. ``p′`` is a central difference of that
probability with step ``1e-3·u``: one rule for every system, whatever its link.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from stream.ratings.base import RatingError, _coerce

#: the side of the first player of a non-neutral match
MATCH_SIDE = "match"
#: the longest ``side`` label of a team (schemas/round.json)
MAX_SIDE_LENGTH = 32
#: relative step of the central difference of the system's probability (in units of u)
DERIVATIVE_STEP = 1e-3
#: parameter keys of the advantage (``--param``, a pool's configuration), all starting with this
PREFIX = "advantage"
#: a side's belief as stored (Redis ``<prefix>:{pool}:adv``: side -> these bytes): mean and variance,
#: little-endian float64, so what is read back is the very belief (no decimal text)
_STORED = struct.Struct("<dd")


#: a side's own starting belief (``AdvantageParams.sides``): the key of its prior mean and of its prior sd
SIDE_INIT, SIDE_SD = f"{PREFIX}_init_", f"{PREFIX}_sd_"


@dataclass(frozen=True)
class AdvantageParams:
    """Per-pool settings. ``advantage``: learn and use it (false: every event is neutral);
    ``advantage_init``: the match side's prior mean (performance units); ``advantage_sd``: every
    side's prior sd (units u); ``advantage_drift``: the variance a side's belief gains per event
    (units u²: the learning rate of a settled belief).

    ``sides``: a side's own prior from the keys ``advantage_init_<side>`` / ``advantage_sd_<side>``
    (``mmr fit`` writes them), None where the general prior holds; the match side's mean is only
    ``advantage_init`` (one spelling)."""

    advantage: bool = True
    advantage_init: float = 0.0
    advantage_sd: float = 1.0
    advantage_drift: float = 1e-6
    sides: tuple[tuple[str, float | None, float | None], ...] = ()

    def __post_init__(self) -> None:
        ok = {"advantage_init": math.isfinite(self.advantage_init),
              "advantage_sd": math.isfinite(self.advantage_sd) and self.advantage_sd >= 0,
              "advantage_drift": math.isfinite(self.advantage_drift) and self.advantage_drift >= 0}
        bad = [f"{k}={getattr(self, k)!r}" for k, good in ok.items() if not good]
        for side, mean, sd in self.sides:
            if not 0 < len(side) <= MAX_SIDE_LENGTH:
                bad.append(f"side {side!r} (a label of 1 to {MAX_SIDE_LENGTH} characters)")
            if mean is not None and (side == MATCH_SIDE or not math.isfinite(mean)):
                bad.append(f"{SIDE_INIT}{side}={mean!r}" + (f" (the match side's is {PREFIX}_init)"
                                                            if side == MATCH_SIDE else ""))
            if sd is not None and not (math.isfinite(sd) and sd >= 0):
                bad.append(f"{SIDE_SD}{side}={sd!r}")
        if bad:
            raise RatingError(f"invalid advantage parameter(s): {', '.join(bad)}")
        object.__setattr__(self, "sides", tuple(sorted(self.sides)))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None = None) -> AdvantageParams:
        known = {f.name: f for f in fields(cls) if f.name != "sides"}
        values = dict(values or {})
        per_side: dict[str, list[float | None]] = {}
        for key in [k for k in values if k not in known]:
            for prefix, slot in ((SIDE_INIT, 0), (SIDE_SD, 1)):
                if key.startswith(prefix) and len(key) > len(prefix):
                    side = key[len(prefix):]
                    per_side.setdefault(side, [None, None])[slot] = _coerce(key, values.pop(key), 0.0)
                    break
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise RatingError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}, "
                              f"{SIDE_INIT}<side>, {SIDE_SD}<side>")
        sides = tuple((side, None if m is None else float(m), None if sd is None else float(sd))
                      for side, (m, sd) in per_side.items())
        return cls(**{k: _coerce(k, raw, getattr(cls, k)) for k, raw in values.items()}, sides=sides)

    def as_dict(self) -> dict[str, Any]:
        """The parameters as ``from_mapping`` reads them (a side's prior under its own keys)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sides"}
        for side, mean, sd in self.sides:
            if mean is not None:
                out[SIDE_INIT + side] = mean
            if sd is not None:
                out[SIDE_SD + side] = sd
        return out

    def prior(self, side: str) -> tuple[float, float]:
        """A side's prior before any event: mean (performance units), sd (u)."""
        mean, sd = (self.advantage_init if side == MATCH_SIDE else 0.0), self.advantage_sd
        for name, own_mean, own_sd in self.sides:
            if name == side:
                mean = mean if own_mean is None else own_mean
                sd = sd if own_sd is None else own_sd
        return mean, sd


def split_params(values: Mapping[str, Any] | None) -> tuple[dict[str, Any], AdvantageParams]:
    """A pool's parameters split into the system's and the advantage's (keys ``advantage*``)."""
    mine = {k: v for k, v in (values or {}).items() if k.startswith(PREFIX)}
    rest = {k: v for k, v in (values or {}).items() if not k.startswith(PREFIX)}
    return rest, AdvantageParams.from_mapping(mine)


@dataclass(frozen=True, slots=True)
class SideBelief:
    """A side's advantage: mean and variance (performance units of the system)."""

    mean: float
    var: float


@dataclass
class Advantages:
    """The learned advantages of one pool (module docstring); ``unit``: the system's u."""

    params: AdvantageParams
    unit: float
    sides: dict[str, SideBelief] = field(default_factory=dict)

    def belief(self, side: str | None) -> SideBelief | None:
        """The side's belief (its prior when never seen); None for no side or with the advantage off."""
        if side is None or not self.params.advantage:
            return None
        got = self.sides.get(side)
        if got is not None:
            return got
        mean, sd = self.params.prior(side)
        return SideBelief(mean, (sd * self.unit) ** 2)

    def shift(self, side: str | None) -> float:
        """The advantage a side plays with now (0 without one)."""
        b = self.belief(side)
        return 0.0 if b is None else b.mean

    def learn(self, side_a: str | None, side_b: str | None, prob: Callable[[float], float], score: float) -> None:
        """Update the two sides' beliefs by the outcome ``score`` of the first side (1, ½, 0);
        ``prob(x)``: the system's probability that the first side finishes ahead (a draw counting
        one half) when it plays with advantage ``x`` over the second (module docstring)."""
        ba, bb = self.belief(side_a), self.belief(side_b)
        if side_a == side_b or (ba is None and bb is None):
            return  # the same side (or none) on both: the outcome says nothing about an advantage
        drift = self.params.advantage_drift * self.unit * self.unit
        va = 0.0 if ba is None else ba.var + drift
        vb = 0.0 if bb is None else bb.var + drift
        x = (0.0 if ba is None else ba.mean) - (0.0 if bb is None else bb.mean)
        step = DERIVATIVE_STEP * self.unit
        try:
            p = prob(x)
            dp = (prob(x + step) - prob(x - step)) / (2.0 * step)
        except ArithmeticError:  # ratings out of any range (an overflow): the outcome teaches nothing
            p, dp = 0.5, math.nan
        q = p * (1.0 - p)
        if not (q > 0.0 and math.isfinite(dp)):  # a certain outcome carries no information on x
            g = info = 0.0
        else:
            g = (score - p) * dp / q
            info = dp * dp / q
        denom = 1.0 + info * (va + vb)
        if ba is not None and side_a is not None:
            self.sides[side_a] = SideBelief(ba.mean + va * g / denom, va - va * va * info / denom)
        if bb is not None and side_b is not None:
            self.sides[side_b] = SideBelief(bb.mean - vb * g / denom, vb - vb * vb * info / denom)

    def copy(self) -> Advantages:
        """The same beliefs, learned on independently (a step that may fail learns on a copy)."""
        return Advantages(self.params, self.unit, dict(self.sides))

    def stored(self) -> dict[str, bytes]:
        """Each learned side's belief as stored (``_STORED``: mean, variance; bit for bit)."""
        return {k: _STORED.pack(b.mean, b.var) for k, b in self.sides.items()}

    @staticmethod
    def decode(raw: bytes) -> SideBelief:
        """One side's stored belief (``stored()``'s value)."""
        return SideBelief(*_STORED.unpack(raw))

    def load(self, stored: Mapping[str, bytes] | Mapping[bytes, bytes]) -> Advantages:
        """These settings with the sides ``stored`` holds (``stored()``'s form; fields as str or bytes)."""
        sides = {}
        for k, raw in stored.items():
            name = k.decode() if isinstance(k, bytes) else k
            try:
                sides[name] = self.decode(raw)
            except struct.error as exc:
                raise RatingError(f"the stored advantage of side {name!r} is not a belief ({exc})") from exc
        return Advantages(self.params, self.unit, sides)

    def as_dict(self) -> dict[str, dict[str, float]]:
        """The learned sides (what ``GET /pools/{pool}`` and ``mmr export`` show)."""
        return {k: {"mean": b.mean, "sd": math.sqrt(b.var)} for k, b in sorted(self.sides.items())}
