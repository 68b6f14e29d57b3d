"""The side advantage as pool state (docs/advantage.md): one path that rates an event with it and learns
it (``stream.ratings.sided``), shared by ``mmr eval``, the engine (embedded replay) and the worker's step
(``rate_ops``); what it stores (``:adv``), and that neither batching nor a replayed batch changes it."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.client import match_batch_json, match_json, round_json
from stream.engine.embedded import EmbeddedPipeline
from stream.engine.pool import PoolConfigError, PoolEngine
from stream.events.model import MatchBatch, MatchEvent, RoundEvent, Teams
from stream.events.validate import decode_event
from stream.ratings import make_system
from stream.ratings.advantage import MATCH_SIDE, AdvantageParams, Advantages, SideBelief
from stream.ratings.base import RatingError
from stream.service.config import PoolConfig, Settings
from stream.service.messages import DeadLetter, Message
from stream.service.metrics import MAX_ADVANTAGE_SERIES, Metrics
from stream.service.planning import plan_batch, step_inputs
from stream.service.step_rating import rate_ops, sided_step
from stream.state.cache import BeliefCache
from stream.state.keys import POOL_SUFFIXES
from stream.tools.evaluate import evaluate_events
from stream.tools.publish import messages

SYSTEMS = ["elo", "elo-mmr", "trueskill"]


def _events(seed: int, n: int, pool: str = "p") -> list[MatchEvent | RoundEvent]:
    """Matches (a third neutral) and rounds of two teams with sides listed either way (some ties)."""
    rng = random.Random(seed)
    out: list[MatchEvent | RoundEvent] = []
    for i in range(n):
        if rng.random() < 0.65:
            a, b = rng.sample(range(8), 2)
            out.append(MatchEvent(event_id=f"m{i}", pool=pool, time=i, a=f"x{a}", b=f"x{b}",
                                  score=rng.choice([0.0, 0.5, 1.0]), neutral=rng.random() < 0.33))
        else:
            ps = rng.sample(range(8), 4)
            r = rng.choice([(1, 2), (2, 1), (1, 1)])
            sides = rng.choice([("home", "away"), ("away", "home")])
            out.append(RoundEvent(event_id=f"r{i}", pool=pool, round_id=f"r{i}", time=i,
                                  players=[f"x{p}" for p in ps], ranks=np.array([r[0], r[0], r[1], r[1]]),
                                  teams=Teams(team_of=np.array([0, 0, 1, 1]), ranks=np.array(r), weights=np.ones(4),
                                              sides=sides)))
    return out


def _embedded(system: str, events: list[Any], batch_size: int, params: dict[str, Any] | None = None,
              ) -> tuple[dict[str, bytes], dict[str, bytes]]:
    pipe = EmbeddedPipeline(system, params, batch_size=batch_size)
    for e in events:
        pipe.add("match" if isinstance(e, MatchEvent) else "round", e)
    pipe.flush()
    beliefs = {player: np.asarray(b).tobytes() for _, player, b in pipe.beliefs()}
    return beliefs, pipe.engines["p"].advantages.stored()


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(SYSTEMS), st.integers(0, 10_000), st.integers(1, 9))
def test_sequential_equals_batched_and_equals_eval(system: str, seed: int, batch_size: int) -> None:
    """The same beliefs and learned advantages, bit for bit, one match at a time, in batches of any size,
    and as ``mmr eval`` learns them (one implementation of "rate with the advantage, then learn it")."""
    events = _events(seed, 60)
    one = _embedded(system, events, 1)
    assert _embedded(system, events, batch_size) == one == _embedded(system, events, 4096)
    _, ev = evaluate_events(make_system(system), events, warmup=0.0, min_history=0)
    assert {p: np.asarray(b).tobytes() for p, b in ev.beliefs["p"].items()} == one[0]
    assert ev.advantages["p"].stored() == one[1] and set(one[1]) == {MATCH_SIDE, "home", "away"}


def test_off_or_a_system_without_sides_rates_them_as_neutral() -> None:
    """``advantage=false``: every event rates as the same event without sides; so does a system that takes
    none (its steps never read the advantages)."""
    events = _events(3, 40)
    without: list[MatchEvent | RoundEvent] = []
    for e in events:
        if isinstance(e, MatchEvent):
            without.append(replace(e, neutral=True))
        else:
            assert e.teams is not None
            without.append(replace(e, teams=replace(e.teams, sides=None)))
    off = _embedded("elo", events, 5, {"advantage": False})
    assert off == _embedded("elo", without, 5) and off[1] == {}
    on = _embedded("elo", events, 5)
    assert on[0] != off[0]  # (the test can fail: the advantage changes the ratings)
    eng = PoolEngine.of_params("p", "codeforces", {})
    assert not eng.takes_sides and not eng.sided_matches(MatchBatch("p", a=["a"], b=["b"], scores=[1.0], times=[0]))


def test_params_split_wherever_a_pool_gets_them() -> None:
    eng = PoolEngine.from_meta("p", "elo", {"k": 20, "advantage_init": 30, "advantage_sd": "0.5"})
    assert eng.system.params.as_dict()["k"] == 20.0 and eng.takes_sides
    assert eng.advantage == AdvantageParams(advantage_init=30.0, advantage_sd=0.5)
    assert eng.advantages.shift(MATCH_SIDE) == 30.0
    assert not PoolEngine.of_params("p", "elo-mmr", {"advantage": "false"}).takes_sides
    with pytest.raises(PoolConfigError, match="advantage_sd"):
        PoolEngine.from_meta("p", "elo", {"advantage_sd": -1})
    # a side's own prior, as a pools file written by ``mmr fit`` gives it, comes with the stored meta
    sided_meta = {"advantage_init_home": 26.5, "advantage_sd_home": 0.04, "advantage_init_away": -26.5}
    eng = PoolEngine.from_meta("p", "elo-mmr", sided_meta)
    assert eng.advantage.as_dict() | sided_meta == eng.advantage.as_dict()
    assert eng.advantages.shift("home") == 26.5 and eng.advantages.shift("away") == -26.5
    with pytest.raises(PoolConfigError, match="advantage_init_match"):
        PoolEngine.from_meta("p", "elo", {"advantage_init_match": 1})
    with pytest.raises(RatingError, match="advantage_sdd"):
        PoolEngine.of_params("p", "elo", {"advantage_sdd": 1})


def test_stored_bytes_are_the_beliefs_bit_for_bit() -> None:
    adv = Advantages(AdvantageParams(), 315.0)
    adv.learn(MATCH_SIDE, None, lambda x: 1 / (1 + 10 ** (-x / 400)), 1.0)
    adv.learn("home", "away", lambda x: 1 / (1 + 10 ** (-x / 400)), 0.0)
    raw = adv.stored()
    back = adv.load({k.encode(): v for k, v in raw.items()})
    assert back.sides == adv.sides and back.stored() == raw and len(raw["home"]) == 16
    with pytest.raises(RatingError, match="side 'home'"):
        adv.load({b"home": b"short"})
    assert "adv" in POOL_SUFFIXES


def test_match_batch_carries_neutral() -> None:
    batch = MatchBatch("p")
    batch.add(MatchEvent(event_id="a", pool="p", time=1, a="x", b="y", score=1.0))
    assert batch.neutral is None
    batch.add(MatchEvent(event_id="b", pool="p", time=2, a="y", b="x", score=0.0, neutral=True))
    other = MatchBatch("p", event_ids=["c"], a=["x"], b=["z"], scores=[0.5], times=[3])
    batch.extend(other)
    assert batch.neutral == [False, True, False]
    assert [batch.event(i).neutral for i in range(3)] == [False, True, False]
    assert batch.slice(1, 3).neutral == [True, False] and other.slice(0, 1).neutral is None


def _dead(msg: Message, reason: str, eid: str | None, pool: str | None) -> DeadLetter:
    raise AssertionError(f"dead letter {reason}")


def _wire(events: list[Any], form: str) -> list[bytes]:
    """The events as messages, rounds whole (their sides kept): ``rows``, neutral matches as ``match``, the
    others as ``match_batch`` of one; ``columns``, as the publisher sends them (``match_columns`` of up to 4
    matches, a ``neutral`` column in those holding a neutral match)."""
    if form == "columns":
        records = [("x", "match" if isinstance(e, MatchEvent) else "round", e) for e in events]
        return [value for _, _, value, _, _ in messages(records, Settings(), 4)]
    out: list[bytes] = []
    for e in events:
        if isinstance(e, RoundEvent):
            out.append(round_json(e))
        elif e.neutral:
            out.append(match_json(e))
        else:
            out.append(match_batch_json(e.pool, [e]))
    return out


@pytest.mark.parametrize(("system", "form"), [("elo", "rows"), ("elo-mmr", "rows"), ("elo", "columns"),
                                              ("elo-mmr", "columns")])
def test_the_worker_step_rates_like_the_embedded_replay_and_a_replayed_step_learns_nothing(system: str,
                                                                                           form: str) -> None:
    """``rate_ops`` from what a step read (beliefs and ``:adv``), steps cut anywhere: the embedded replay's
    beliefs and advantages; an engine left with other advantages (another worker rated the pool since)
    rates from what was read; a step whose events were applied before writes no advantage."""
    events = _events(11, 50)
    want = _embedded(system, events, 4096)
    s = Settings(system=system, pools={"p": PoolConfig(system)})
    engine = PoolEngine.of_params("p", system, {})
    stored: dict[str, bytes | None] = {}
    adv: dict[bytes, bytes] = {}
    seen: set[str] = set()
    wire = _wire(events, form)
    if form == "columns":  # (the test can fail: mixed messages are what it is about)
        flags = [orjson.loads(v).get("neutral") for v in wire if orjson.loads(v)["type"] == "match_columns"]
        assert any(f is not None and True in f and False in f for f in flags) and None in flags
    for start in range(0, len(wire), 7):
        msgs = [Message("in", 0, start + i, v) for i, v in enumerate(wire[start:start + 7])]
        ops = plan_batch(msgs, s, None, _dead).ops["p"]
        step = step_inputs(ops)
        assert sided_step(engine, ops)
        engine.advantages = engine.advantages.load({"home": b"\x00" * 16})  # stale: must not be used
        commit, _, _, counts = rate_ops(engine, ops, {p: stored.get(p) for p in step.players}, seen, _dead,
                                        advantages=adv)
        assert counts.applied == len(step.ids)
        stored.update(commit.beliefs)
        adv.update((k.encode(), v) for k, v in commit.advantages.items())
        seen.update(commit.event_ids)
        # what the commit writes: the sides that changed, nothing else
        assert commit.advantages and all(engine.advantages.stored()[k] == v for k, v in commit.advantages.items())
    decoded = engine.decode_all(stored, list(stored), remember=False)
    assert {p: np.asarray(b).tobytes() for p, b in decoded.items()} == want[0]
    assert {k.decode(): v for k, v in adv.items()} == want[1]
    # the whole history again (a re-delivery): nothing rated, no advantage written
    msgs = [Message("in", 0, i, v) for i, v in enumerate(wire)]
    ops = plan_batch(msgs, s, None, _dead).ops["p"]
    commit, _, _, counts = rate_ops(engine, ops, dict(stored), seen, _dead, advantages=adv)
    assert counts.applied == 0 and commit.advantages == {} and commit.beliefs == {}


def test_steps_without_sides_do_not_read_the_advantages() -> None:
    s = Settings(system="elo")
    rounds = [orjson.dumps({"type": "round", "event_id": "r", "pool": "p", "round_id": "r", "time": 1,
                            "standings": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]})]
    neutral = [match_json(MatchEvent(event_id="m", pool="p", time=1, a="a", b="b", score=1.0, neutral=True))]
    home = [match_json(MatchEvent(event_id="h", pool="p", time=1, a="a", b="b", score=1.0))]
    for values, engine, want in ((rounds, PoolEngine.of_params("p", "elo", {}), False),
                                 (neutral, PoolEngine.of_params("p", "elo", {}), False),
                                 (home, PoolEngine.of_params("p", "elo", {"advantage": False}), False),
                                 (home, PoolEngine.of_params("p", "codeforces", {}), False),
                                 (home, PoolEngine.of_params("p", "elo", {}), True)):
        ops = plan_batch([Message("in", 0, i, v) for i, v in enumerate(values)], s, None, _dead).ops["p"]
        assert sided_step(engine, ops) == want


def test_the_publisher_keeps_neutral_matches_and_team_sides() -> None:
    """Matches go as ``match_columns`` whether neutral or not (the ``neutral`` column only in a message
    holding a neutral one), and decode to the very events; team rounds keep their sides."""
    events = _events(5, 30)
    got: list[Any] = []
    back: list[Any] = []
    for _, _, value, n, _ in messages([("x", "match" if isinstance(e, MatchEvent) else "round", e) for e in events],
                                      Settings(), 100):
        obj = orjson.loads(value)
        got.append((obj["type"], n, obj.get("neutral"), [t.get("side") for t in obj.get("teams", [])]))
        _, decoded = decode_event(obj)
        back += decoded if obj["type"] == "match_columns" else [decoded]
    assert {t for t, _, _, _ in got} == {"match_columns", "round"}
    assert all(neutral is None or (len(neutral) == n and True in neutral) for t, n, neutral, _ in got
               if t == "match_columns")
    assert any(neutral for t, _, neutral, _ in got if t == "match_columns")
    assert all(sides in (["home", "away"], ["away", "home"]) for t, _, _, sides in got if t == "round")
    assert sum(n for _, n, _, _ in got) == len(events)
    assert [m for m in back if isinstance(m, MatchEvent)] == [e for e in events if isinstance(e, MatchEvent)]


def test_the_cache_keeps_the_advantages_of_its_gen() -> None:
    cache = BeliefCache(1 << 20)
    cache.fill("p", "3", {"a": b"x"}, {b"match": b"1" * 16})
    cache.committed("p", "3", 4, {"a": b"y"}, {"home": b"2" * 16})
    assert cache.pool("p").adv == {b"match": b"1" * 16, b"home": b"2" * 16} and cache.pool("p").gen == "4"
    cache.committed("p", "7", 8, {"a": b"z"})  # another gen than known: nothing known of the advantages
    assert cache.pool("p").adv is None
    cache.fill("p", "8", {"a": b"z"})  # a read that did not take them
    assert cache.pool("p").adv is None


def test_the_advantage_gauge_is_bounded() -> None:
    m = Metrics()
    value = Advantages(AdvantageParams(), 1.0, {"home": SideBelief(12.5, 1.0)}).stored()["home"]
    for k in range(MAX_ADVANTAGE_SERIES + 5):
        m.set_advantages(f"pool{k}", {"home": value})
    samples = [s for metric in m.registry.collect() for s in metric.samples if s.name == "mmr_side_advantage"]
    assert len(samples) == MAX_ADVANTAGE_SERIES and {s.value for s in samples} == {12.5}
