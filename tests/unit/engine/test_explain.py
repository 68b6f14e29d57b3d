"""Explained rating changes (stream.engine.explain) and `mmr replay --embedded --history`."""

from __future__ import annotations

import itertools
import lzma
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from history_sink import history_lines
from repo_paths import ROOT
from repo_paths import SHARED_DATA as DATA

from stream.engine.embedded import EmbeddedPipeline
from stream.engine.explain import MAX_MATCH_IDS, player_matches
from stream.engine.pool import PoolEngine
from stream.events.inputs import read_records
from stream.events.model import MatchBatch, MatchEvent, RatingOutput, index_players, rating_value
from stream.ratings.elo_mmr.system import EloMMR
from stream.tools.replay import replay

CODEFORCES = DATA / "codeforces" / "contests-2010-2020.jsonl.xz"


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _round(eid: str, rid: str, t: int, standings: list[tuple[str, int]], pool: str = "default") -> dict[str, Any]:
    return {"type": "round", "event_id": eid, "pool": pool, "round_id": rid, "time": t,
            "standings": [{"player": p, "rank": r} for p, r in standings]}


def _match(eid: str, t: int, a: str, b: str, score: float, pool: str = "m") -> dict[str, Any]:
    return {"type": "match", "event_id": eid, "pool": pool, "time": t, "a": a, "b": b, "score": score}


def _history(paths: list[Path], system: str, **kw: Any) -> tuple[list[dict[str, Any]], dict[tuple[str, str], Any]]:
    rows: list[dict[str, Any]] = []
    pipe = EmbeddedPipeline(system, history=history_lines(rows), **kw)
    for p in paths:
        pipe.run(read_records(p))
    return rows, {(r["pool"], r["player"]): r for r in pipe.final_ratings()}


def _cli(*args: str) -> None:
    res = CliRunner().invoke(replay, [*args, "--embedded", "--no-progress"])
    assert res.exit_code == 0, res.output


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_two_rounds_by_hand(tmp_path: Path) -> None:
    """Each line: the rating after, the rating before (the prior's, 1500 − 3·(350 − 80) = 690, for a
    newcomer; the previous line's after that), the change, the round and the performance that
    EloMMR.rate_round_detailed computes for the same beliefs."""
    src = _write(tmp_path / "r.jsonl", [_round("e1", "r1", 1000, [("a", 1), ("b", 2), ("c", 3)]),
                                        _round("e2", "r2", 2000, [("c", 1), ("a", 2)])])
    rows, _ = _history([src], "elo-mmr")
    system = EloMMR()
    first = system.rate_round_detailed([system.new_belief()] * 3, [1, 2, 3], 1000)
    b = dict(zip("abc", first.beliefs, strict=True))
    second = system.rate_round_detailed([b["c"], b["a"]], [1, 2], 2000)
    want = [("a", first, 0, "r1", "e1", 1000, None), ("b", first, 1, "r1", "e1", 1000, None),
            ("c", first, 2, "r1", "e1", 1000, None), ("c", second, 0, "r2", "e2", 2000, b["c"]),
            ("a", second, 1, "r2", "e2", 2000, b["a"])]
    assert [(r["player"], r["round_id"]) for r in rows] == [(w[0], w[3]) for w in want]
    for row, (player, res, i, rid, eid, t, prev) in zip(rows, want, strict=True):
        after = system.summary(res.beliefs[i])
        before = system.summary(prev) if prev is not None else system.summary(system.new_belief())
        assert row == {"type": "rating", "pool": "default", "player": player, "rating": after.rating,
                       "mu": after.mu, "sigma": after.sigma, "rounds": after.rounds, "version": after.rounds,
                       "event_id": eid, "time": t, "system": "elo-mmr", "rating_before": before.rating,
                       "mu_before": before.mu, "sigma_before": before.sigma,
                       "delta": after.rating - before.rating, "round_id": rid,
                       "performance": float(res.performances[i])}
    assert rows[0]["rating_before"] == 690.0


def test_matches_by_hand_and_their_batches(tmp_path: Path) -> None:
    """Elo (k = 32, 400 points a factor 10): a beats b (+16 from 1500, both new), then a (1516)
    beats c. One batch: one line per player citing all their matches; --batch-size 1: one line
    per match, each starting from the line before."""
    src = _write(tmp_path / "m.jsonl", [_match("m1", 1, "a", "b", 1.0), _match("m2", 2, "a", "c", 1.0)])
    expected_a = 1.0 / (1.0 + 10 ** ((1500 - 1516) / 400))
    a_after = 1516 + 32 * (1 - expected_a)
    rows, final = _history([src], "elo", params={"advantage": False})  # (a plays with no home advantage)
    by = {r["player"]: r for r in rows}
    assert len(rows) == 3
    assert by["a"]["matches"] == 2 and by["a"]["match_ids"] == ["m1", "m2"] and by["a"]["event_id"] == "m2"
    assert by["a"]["rating_before"] == 1500.0 and by["a"]["rating"] == pytest.approx(a_after, abs=1e-9)
    assert by["a"]["delta"] == by["a"]["rating"] - 1500.0 and by["a"]["version"] == 2
    assert by["b"]["matches"] == 1 and by["b"]["match_ids"] == ["m1"] and by["b"]["rating"] == 1484.0
    assert "performance" not in by["a"] and "round_id" not in by["a"]
    one, _ = _history([src], "elo", batch_size=1, params={"advantage": False})
    a_lines = [r for r in one if r["player"] == "a"]
    assert [r["match_ids"] for r in a_lines] == [["m1"], ["m2"]]
    assert [r["rating_before"] for r in a_lines] == [1500.0, 1516.0]
    assert a_lines[1]["rating"] == by["a"]["rating"] == final[("m", "a")]["rating"]


def test_match_ids_are_bounded_and_the_latest() -> None:
    batch = MatchBatch("m")
    for i in range(40):
        batch.add(MatchEvent(event_id=f"x{i}", pool="m", time=i, a="a" if i % 2 else f"o{i}",
                             b=f"o{i}" if i % 2 else "a", score=1.0))
    batch.add(MatchEvent(event_id="last", pool="m", time=99, a="b", b="c", score=0.5))
    idx = index_players(batch)
    got = dict(zip(idx.players, zip(*player_matches(batch, idx), strict=True), strict=True))
    assert got["a"] == (40, [f"x{i}" for i in range(40 - MAX_MATCH_IDS, 40)])
    assert got["b"] == got["c"] == (1, ["last"])


@pytest.mark.parametrize(("system", "kind"), [("elo-mmr", "rounds"), ("elo-mmx", "rounds"), ("cowan", "matches"),
                                              ("glicko", "matches")])
def test_history_chains_and_ends_in_the_final_ratings(tmp_path: Path, system: str, kind: str) -> None:
    """`mmr replay --history`: per player, every line starts where the one before ended (bit for bit),
    the version grows by the events it covers, and the last line is the player's row of --out."""
    rng = np.random.default_rng(3)
    if kind == "rounds":
        events = [_round(f"e{k}", f"r{k}", 1000 * k, [(f"p{int(i)}", int(r)) for i, r in
                                                      zip(rng.choice(30, 8, replace=False), rng.integers(1, 6, 8),
                                                          strict=True)]) for k in range(25)]
    else:
        events = [_match(f"m{k}", k, f"p{a}", f"p{(a + 1 + int(rng.integers(19))) % 20}", float(rng.integers(3)) / 2)
                  for k, a in enumerate(rng.integers(20, size=400).tolist())]
    src = _write(tmp_path / "in.jsonl", events)
    out, hist = tmp_path / "out.jsonl", tmp_path / "sub" / "history.jsonl"
    _cli(str(src), "--system", system, "--out", str(out), "--history", str(hist), "--batch-size", "37")
    lines = _read(hist)
    finals = {(r["pool"], r["player"]): r for r in _read(out)}
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in lines:
        by[(r["pool"], r["player"])].append(r)
    prior = lines[0]["rating_before"]
    assert set(by) == {k for k, r in finals.items() if r["rounds"]}
    for key, rs in by.items():
        assert rs[0]["rating_before"] == prior
        for prev, cur in itertools.pairwise(rs):
            assert (cur["rating_before"], cur["mu_before"], cur["sigma_before"]) == (prev["rating"], prev["mu"],
                                                                                    prev["sigma"])
        for r in rs:
            assert r["delta"] == r["rating"] - r["rating_before"]
            assert r["version"] == r["rounds"]
            if kind == "matches":
                assert len(r["match_ids"]) == min(r["matches"], MAX_MATCH_IDS) and r["match_ids"][-1] == r["event_id"]
        steps = [r["version"] - (p["version"] if p else 0) for p, r in zip([None, *rs], rs, strict=False)]
        assert steps == [r["matches"] if kind == "matches" else 1 for r in rs]
        last = rs[-1]
        assert {k: last[k] for k in ("pool", "player", "rating", "mu", "sigma", "rounds")} == finals[key]
        assert ("performance" in last) == (system == "elo-mmr")


def test_every_line_is_a_rating_message_of_the_schema(tmp_path: Path) -> None:
    """History lines (the worker's messages) validate against schemas/rating.json, whose
    explanation fields are typed (extra fields stay allowed)."""
    import fastjsonschema

    schema = orjson.loads((ROOT / "stream" / "schemas" / "rating.json").read_bytes())
    assert {"rating_before", "delta", "round_id", "matches", "match_ids", "performance"} <= set(schema["properties"])
    events = [_round("e1", "r1", 1, [("a", 1), ("b", 2), ("c", 2)])]
    events += [_match(f"m{k}", k, "a", "b", 1.0) for k in range(20)]
    rows, _ = _history([_write(tmp_path / "in.jsonl", events)], "elo-mmr", pool_systems={"m": ("elo", {})})
    assert {"performance" in r for r in rows} == {True, False} and max(len(r.get("match_ids", ())) for r in rows) == 16
    check = fastjsonschema.compile(schema)
    for r in rows:
        check(r)


def test_bad_input_leaves_no_history(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", [_round("e1", "r1", 1, [("a", 1), ("b", 2)])])
    with src.open("ab") as fh:
        fh.write(b'{"type": "round", "nonsense": 1}\n')
    hist = tmp_path / "h.jsonl"
    res = CliRunner().invoke(replay, [str(src), "--embedded", "--no-progress", "--history", str(hist)])
    assert res.exit_code == 2 and "in.jsonl:2" in res.output
    assert list(tmp_path.iterdir()) == [src]  # neither the history nor its temporary file


def test_history_applies_only_in_process(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.jsonl", [_round("e1", "r1", 1, [("a", 1), ("b", 2)])])
    res = CliRunner().invoke(replay, [str(src), "--broker", "127.0.0.1:1", "--history", str(tmp_path / "h")])
    assert res.exit_code != 0 and "--history" in res.output


@pytest.mark.data
@pytest.mark.skipif(not CODEFORCES.exists(), reason=f"shared data absent: {CODEFORCES} (needs ../shared/data)")
def test_codeforces_prefix_history(tmp_path: Path) -> None:
    """The first 60 Codeforces contests: one line per result, each with the player's performance
    in that contest, chained per player, ending in --out."""
    src = tmp_path / "cf.jsonl.xz"
    results = 0
    with lzma.open(CODEFORCES, "rb") as fh, lzma.open(src, "wb") as dst:
        for _, line in zip(range(60), fh, strict=False):
            dst.write(line)
            results += len(orjson.loads(line)["standings"])
    out, hist = tmp_path / "out.jsonl", tmp_path / "h.jsonl"
    _cli(str(src), "--out", str(out), "--history", str(hist))
    last: dict[str, dict[str, Any]] = {}
    n = 0
    for line in hist.read_bytes().splitlines():
        r = orjson.loads(line)
        prev = last.get(r["player"])
        assert r["rating_before"] == (prev["rating"] if prev else 690.0)
        assert math.isfinite(r["performance"]) and r["version"] == (prev["version"] + 1 if prev else 1)
        last[r["player"]] = r
        n += 1
    assert n == results
    finals = _read(out)
    assert len(finals) == len(last)
    for f in finals:
        assert {k: last[f["player"]][k] for k in f} == f


def _history_bytes(paths: list[Path], system: str, by_player: bool = False, **kw: Any) -> tuple[bytes, int]:
    """The ``--history`` file's bytes, and how many of its rounds were explained by columns (from the
    round's ``RoundChange``: ``explain.round_numbers``, their explanations one text column); with
    ``by_player``, every round explained player by player (the path that explains what the
    arena cannot give as columns)."""
    from stream.engine import explain

    chunks: list[bytes] = []
    by_columns = 0
    numbers = explain.round_numbers

    def sink(outputs: Sequence[RatingOutput]) -> None:
        chunks.append(b"".join(rating_value(o) + b"\n" for o in outputs))

    def counted(change: Any) -> Any:
        nonlocal by_columns
        by_columns += 1
        return numbers(change)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(explain, "round_numbers", counted)
        if by_player:
            mp.setattr(PoolEngine, "store_round_change", lambda self, event, held: (
                self.store_round(event, held), None))
        pipe = EmbeddedPipeline(system, history=sink, **kw)
        for p in paths:
            pipe.run(read_records(p))
    return b"".join(chunks), by_columns


@pytest.mark.parametrize("system", ["elo-mmr", "elo-mmx", "trueskill"])
def test_a_rounds_history_by_columns_is_the_per_player_history_byte_for_byte(tmp_path: Path, system: str) -> None:
    """The messages of a round rated in its pool's arena, written by columns from its
    ``RoundChange``, are those of the per-player explanation, byte for byte: newcomers, ties,
    players coming back, round ids that need escaping, a round that changes nothing."""
    rng = np.random.default_rng(11)
    ids = ["r%d", 'q"uote', "ünï €", "back\\slash", "100%"]
    events = [_round(f"e{k}", f"{ids[k % len(ids)]}{k}", 1000 * k,
                     [(f"p{int(i)}", int(r)) for i, r in zip(rng.choice(60, n, replace=False), rng.integers(1, 9, n),
                                                            strict=True)])
              for k, n in enumerate(rng.integers(2, 40, size=40).tolist())]
    events.insert(7, _round("solo", "solo", 6500, [("p1", 1)]))
    events.append(_round("other", "o", 99_000, [("a", 1), ("b", 1), ("c", 2)], pool="second"))
    src = _write(tmp_path / "in.jsonl", events)
    got, by_columns = _history_bytes([src], system)
    want, none = _history_bytes([src], system, by_player=True)
    assert none == 0 and got and got == want
    assert (by_columns > 30) == (system in ("elo-mmr", "elo-mmx"))  # (trueskill's rounds: not in an arena)


@pytest.mark.data
@pytest.mark.skipif(not CODEFORCES.exists(), reason=f"shared data absent: {CODEFORCES} (needs ../shared/data)")
def test_codeforces_prefix_history_by_columns(tmp_path: Path) -> None:
    """The first 40 Codeforces contests' history, by columns and player by player: the same bytes."""
    src = tmp_path / "cf.jsonl.xz"
    with lzma.open(CODEFORCES, "rb") as fh, lzma.open(src, "wb") as dst:
        for _, line in zip(range(40), fh, strict=False):
            dst.write(line)
    got, by_columns = _history_bytes([src], "elo-mmr")
    want, _ = _history_bytes([src], "elo-mmr", by_player=True)
    assert by_columns == 40 and got == want


def test_encoded_explanations_are_the_bytes_of_their_dicts() -> None:
    """The worker encodes each explanation once (``Explainer``: JSON text by columns) and embeds
    those bytes in the message (``rating_value``) and the ``:chg`` record (``change_records``):
    both are ``orjson.dumps`` of the decoded fields byte for byte, for floats orjson writes in
    every notation, ids that need escaping or hold ``%``, a player with a round's performance
    and one without, and matches of two units of a step adding up."""
    from stream.engine.explain import Explainer
    from stream.events.model import RatingOutput, RoundEvent
    from stream.ratings.base import Rating
    from stream.service.step_rating import change_records

    odd = [1e16, -1.5e-7, 5e-324, 0.1, -0.0, 1e300, 123456.789, 2.0**60, -7.0, 1e-5]
    players = [f"p{i}" for i in range(len(odd))] + ['q "x"', "r%s%%", "s\n\u00e9\u2028", "t\\"]
    n = len(players)
    before = {p: Rating(odd[i % 10], odd[(i + 3) % 10], abs(odd[(i + 5) % 10]), 3) for i, p in enumerate(players)}
    after = {p: Rating(odd[(i + 1) % 10] * 3, odd[(i + 2) % 10], 1.5, 4) for i, p in enumerate(players)}
    perfs = {p: odd[(i + 7) % 10] for i, p in enumerate(players)}
    ex = Explainer()
    ev = RoundEvent(event_id='e"1%d', pool="pool", round_id='round "%s" \u00fc', time=5, players=players[:6],
                    ranks=np.arange(1, 7))
    ex.round(ev, before, {p: after[p] for p in players[:6]}, perfs)
    ex.round(RoundEvent(event_id="e2", pool="pool", round_id="r%b", time=6, players=players[6:9],
                        ranks=np.arange(1, 4)), before,
             {p: after[p] for p in players[6:9]}, {players[6]: 0.25})  # p7, p8: no performance
    batch = MatchBatch("pool")
    for j in range(30):
        batch.add(MatchEvent(event_id=f"m{j}%s\"\\", pool="pool", time=j, a=players[9 + j % 5],
                             b=players[9 + (j % 5 + 1 + j % 4) % 5], score=0.5))
    idx = index_players(batch)
    ex.matches(batch, idx, before, {p: after[p] for p in idx.players})
    again = MatchBatch("pool")
    again.add(MatchEvent(event_id="late\u00e9", pool="pool", time=99, a=players[9], b=players[0], score=1.0))
    ex.matches(again, index_players(again), before, {p: Rating(-3.25, 1.0, 2.0, 9) for p in (players[9], players[0])})
    outputs = [RatingOutput("pool", p, r.rating, r.mu, r.sigma, 4, 4, f"cause%{i}\"", i, "elo-mmr", ex.of.get(p))
               for i, (p, r) in enumerate(after.items())]
    assert all(isinstance(o.explain, bytes) for o in outputs) and len(outputs) == n
    columns = ([o.player for o in outputs] + ["unexplained"], [o.version for o in outputs] + [1],
               [o.event_id for o in outputs] + ["e"], [o.time for o in outputs] + [1],
               [cast(bytes, o.explain) for o in outputs] + [None])
    records = change_records(*columns)
    assert len(records) == n and "unexplained" not in records
    for o in outputs:
        fields = ex.fields(o.player)
        assert fields is not None and fields == orjson.loads(o.explain)  # type: ignore[arg-type]
        assert rating_value(o) == orjson.dumps(o.as_dict()) == orjson.dumps({**o._replace(explain=None).as_dict(),
                                                                               **fields})
        assert records[o.player] == orjson.dumps([o.version, o.event_id, o.time, fields])
    assert "performance" in orjson.loads(ex.of[players[1]]) and "match_ids" in orjson.loads(ex.of[players[0]])
    assert "performance" not in orjson.loads(ex.of[players[7]])
    assert orjson.loads(ex.of[players[6]])["performance"] == 0.25
    summed = orjson.loads(ex.of[players[9]])
    played = sum(players[9] in (batch.a[j], batch.b[j]) for j in range(len(batch)))
    assert summed["match_ids"][-1] == "late\u00e9" and summed["matches"] == played + 1 > MAX_MATCH_IDS // 2
    assert summed["delta"] == -3.25 - before[players[9]].rating
