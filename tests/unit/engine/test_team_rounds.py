"""Team rounds end to end without services: decoding, the engine's two paths, the embedded replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from stream.engine.embedded import EmbeddedPipeline
from stream.engine.pool import PoolEngine
from stream.events.inputs import read_records
from stream.events.validate import InvalidEvent, decode_event
from stream.ratings import make_system
from stream.ratings.base import RatingError
from stream.tools.publish import round_json

MMR = [sys.executable, "-m", "stream.cli"]


def _teams_round(eid: str, teams: list[dict[str, Any]], time: int = 1000, pool: str = "p",
                 **extra: Any) -> dict[str, Any]:
    return {"type": "round", "event_id": eid, "pool": pool, "round_id": eid, "time": time, "teams": teams, **extra}


def _team_history(n_rounds: int = 25, seed: int = 4) -> list[dict[str, Any]]:
    """Teams re-formed every round from 16 players, some ties and some partial play."""
    rng = np.random.default_rng(seed)
    players = [f"p{i}" for i in range(16)]
    rows = []
    for r in range(n_rounds):
        nteams = int(rng.integers(2, 5))
        who = rng.permutation(players)[: nteams * int(rng.integers(1, 4))]
        ranks = rng.integers(1, nteams + 1, size=nteams)
        teams: list[dict[str, Any]] = []
        for t, members in enumerate(np.array_split(who, nteams)):
            team: dict[str, Any] = {"players": members.tolist(), "rank": int(ranks[t])}
            if rng.random() < 0.3:
                team["weights"] = [0.5 if k == 0 else 1.0 for k in range(len(members))]
            teams.append(team)
        rows.append(_teams_round(f"t{r}", teams, time=1000 + r * 86_400_000))
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_a_team_round_decodes_team_by_team() -> None:
    _, ev = decode_event(_teams_round("e", [{"players": ["a", "b"], "rank": 2, "weights": [1, 0.25]},
                                            {"players": ["c"], "rank": 1}]))
    assert ev.players == ["a", "b", "c"]
    assert ev.ranks.tolist() == [2, 2, 1]
    assert ev.teams is not None
    assert ev.teams.team_of.tolist() == [0, 0, 1]
    assert ev.teams.ranks.tolist() == [2, 1]
    assert ev.teams.weights.tolist() == [1.0, 0.25, 1.0]
    individual = _teams_round("e", [])
    del individual["teams"]
    assert decode_event({**individual, "standings": [{"player": "a", "rank": 1}]})[1].teams is None


@pytest.mark.parametrize(("change", "field", "reason"), [
    ({"teams": [{"players": ["a", "b"], "rank": 1}, {"players": ["b"], "rank": 2}]}, "teams", "appears twice"),
    ({"teams": [{"players": ["a", "a"], "rank": 1}, {"players": ["b"], "rank": 2}]}, "teams", "appears twice"),
    ({"teams": [{"players": [], "rank": 1}, {"players": ["b"], "rank": 2}]}, "teams.0.players", "at least 1"),
    ({"teams": []}, "teams", "at least 1"),
    ({"teams": [{"players": ["a"], "rank": 0}]}, "teams.0.rank", "bigger than or equal to 1"),
    ({"teams": [{"players": ["a"], "rank": 1, "weights": [1.5]}]}, "teams.0.weights.0", "smaller than or equal"),
    ({"teams": [{"players": ["a"], "rank": 1, "weights": [0]}]}, "teams.0.weights.0", "bigger than 0"),
    ({"teams": [{"players": ["a", "b"], "rank": 1, "weights": [1]}]}, "teams.0.weights", "1 weights for 2"),
    ({"standings": [{"player": "a", "rank": 1}]}, "standings", "exactly one of standings, teams, or"),
])
def test_invalid_team_rounds_name_the_field(change: dict[str, Any], field: str, reason: str) -> None:
    obj = {**_teams_round("e", [{"players": ["x"], "rank": 1}]), **change}
    with pytest.raises(InvalidEvent) as err:
        decode_event(obj)
    assert f"field {field}:" in str(err.value) and reason in str(err.value)


def test_a_round_with_neither_standings_nor_teams_is_refused() -> None:
    obj = _teams_round("e", [])
    del obj["teams"]
    with pytest.raises(InvalidEvent, match="exactly one of standings, teams, or players with ranks"):
        decode_event(obj)


def test_publishing_writes_the_team_round_it_read() -> None:
    for row in _team_history(10):
        _, ev = decode_event(row)
        again = decode_event(orjson.loads(round_json(ev)))[1]
        assert again.players == ev.players and again.teams is not None and ev.teams is not None
        assert again.teams.team_of.tolist() == ev.teams.team_of.tolist()
        assert again.teams.ranks.tolist() == ev.teams.ranks.tolist()
        assert again.teams.weights.tolist() == ev.teams.weights.tolist()


@pytest.mark.parametrize("system", ["elo-mmx", "elo-mmr"])
def test_rounds_of_teams_of_one_replay_as_the_same_rounds_in_standings(tmp_path: Path, system: str) -> None:
    rng = np.random.default_rng(2)
    standings, teams = [], []
    for r in range(20):
        who = rng.permutation(12)[: int(rng.integers(2, 10))]
        ranks = rng.integers(1, 5, size=who.size)
        base = {"type": "round", "event_id": f"r{r}", "pool": "p", "round_id": f"r{r}", "time": r * 3_600_000}
        standings.append({**base, "standings": [{"player": f"p{i}", "rank": int(k)} for i, k in zip(who, ranks,
                                                                                                   strict=True)]})
        teams.append({**base, "teams": [{"players": [f"p{i}"], "rank": int(k)} for i, k in zip(who, ranks,
                                                                                               strict=True)]})

    def run(rows: list[dict[str, Any]]) -> list[tuple[str, str, bytes]]:
        pipe = EmbeddedPipeline(system)
        pipe.run(read_records(_write(tmp_path / "h.jsonl", rows)))
        return [(q, p, np.asarray(b).tobytes()) for q, p, b in pipe.beliefs()]

    assert run(teams) == run(standings)


@pytest.mark.parametrize("system", ["elo-mmx", "elo-mmr"])
def test_the_worker_engine_path_equals_the_embedded_store_path(system: str) -> None:
    """``apply_round`` (encoded beliefs: the worker) and ``store_round`` (the embedded store,
    packed) give the same bits for team rounds, newcomers and known players alike."""
    engine = PoolEngine("p", make_system(system, {}))
    assert engine.packed
    held: dict[str, Any] = {}
    stored: dict[str, bytes | None] = {}
    for row in _team_history():
        _, ev = decode_event(row)
        held.update(engine.store_round(ev, held))
        applied = engine.apply_round(ev, stored)
        stored.update(applied.updates)
        assert set(applied.ratings) <= set(ev.players)
    assert set(held) == {p for p, v in stored.items() if v is not None}
    for p, raw in stored.items():
        assert raw is not None
        assert np.array_equal(engine.decode_all({p: raw}, [p])[p], engine.unpack(held[p]))


@pytest.mark.parametrize("system", ["glicko", "cowan"])
def test_engines_of_systems_without_teams_refuse_team_rounds(system: str) -> None:
    engine = PoolEngine("p", make_system(system, {}))
    _, ev = decode_event(_team_history(1)[0])
    with pytest.raises(RatingError, match="does not rate team rounds"):
        engine.apply_round(ev, {})
    with pytest.raises(RatingError, match="does not rate team rounds"):
        engine.store_round(ev, {})


def test_replay_rates_team_rounds_and_a_system_without_teams_refuses_them_with_file_and_line(tmp_path: Path) -> None:
    rows = [{"type": "round", "event_id": "s", "pool": "p", "round_id": "s", "time": 1,
             "standings": [{"player": "a", "rank": 1}, {"player": "z", "rank": 2}]}, *_team_history(5)]
    src = _write(tmp_path / "teams.jsonl", rows)
    out = tmp_path / "out.jsonl"
    members = {p for row in rows[1:] for t in row["teams"] for p in t["players"]}
    for system in ("elo-mmx", "elo-mmr"):
        ok = subprocess.run([*MMR, "replay", str(src), "--embedded", "--system", system, "--out", str(out),
                             "--no-progress"], capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
        rated = {r["player"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
        assert members <= set(rated) and all(rated[p]["rounds"] >= 1 for p in members)
        out.unlink()
    bad = subprocess.run([*MMR, "replay", str(src), "--embedded", "--system", "glicko", "--out", str(out),
                          "--no-progress"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert f"{src}:2" in bad.stderr and "does not rate team rounds" in bad.stderr
    assert not out.exists()
