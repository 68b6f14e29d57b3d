"""``mmr synth``: deterministic for a seed, valid contest/event JSONL readable by our readers; matches
neutral (the model has no side advantage) unless ``--home-advantage H``, from which a pool learns it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
from click.testing import CliRunner

from stream.engine.embedded import EmbeddedPipeline
from stream.events.inputs import detect_format, read_records
from stream.events.validate import decode_event
from stream.ratings.advantage import MATCH_SIDE
from stream.tools.synth import synth, synth_matches, tie_ranges


def _run(tmp_path: Path, name: str, *args: str) -> bytes:
    out = tmp_path / name
    res = CliRunner().invoke(synth, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out.read_bytes()


def test_rounds_deterministic_and_valid(tmp_path: Path) -> None:
    args = ("--players", "300", "--rounds", "20", "--participation", "0.3", "--seed", "7")
    one = _run(tmp_path, "a.jsonl", *args)
    two = _run(tmp_path, "b.jsonl", *args)
    other = _run(tmp_path, "c.jsonl", *args[:-1], "8")
    assert one == two
    assert one != other
    rows = [orjson.loads(line) for line in one.splitlines()]
    assert len(rows) == 20
    for row in rows:
        st = row["standings"]
        n = len(st)
        assert len({p for p, _, _ in st}) == n
        for k, (_, lo, hi) in enumerate(st):
            assert 0 <= lo <= k <= hi < n
    assert detect_format(tmp_path / "a.jsonl") == "contests"
    events = list(read_records(tmp_path / "a.jsonl"))
    assert [t for _, t, _ in events] == ["round"] * 20


def test_gaussian_matches(tmp_path: Path) -> None:
    args = ("--kind", "matches", "--players", "50", "--rounds", "5", "--matches", "203", "--seed", "3",
            "--noise", "gaussian", "--draw-margin", "40")
    data = _run(tmp_path, "m.jsonl", *args)
    assert data == _run(tmp_path, "m2.jsonl", *args)
    recs = list(read_records(tmp_path / "m.jsonl"))
    assert len(recs) == 203 and all(t == "match" for _, t, _ in recs)
    scores = {m.score for _, _, m in recs}
    assert scores == {0.0, 0.5, 1.0}
    assert all(m.a != m.b for _, _, m in recs)
    times = [m.time for _, _, m in recs]
    assert times == sorted(times)


def test_tie_ranges_by_hand() -> None:
    order, lo, hi = tie_ranges(np.array([10.05, 30.0, 10.02, 5.0]), 0.1)
    assert order.tolist() == [1, 0, 2, 3]
    assert lo.tolist() == [0, 1, 1, 3]
    assert hi.tolist() == [0, 2, 2, 3]


ARGS = (300, 20, 6000, 3)


def _learned(rows: list[dict[str, object]]) -> dict[str, float]:
    """The side advantages Elo learns from ``rows`` (embedded replay, its defaults: advantage on)."""
    pipe = EmbeddedPipeline("elo", None)
    for row in rows:
        etype, ev = decode_event(dict(row))
        pipe.add(etype, ev)
    pipe.flush()
    adv = pipe.engines["default"].advantages
    return {side: adv.shift(side) for side in adv.sides}


def test_matches_are_neutral_and_teach_no_advantage() -> None:
    rows = list(synth_matches(*ARGS))
    assert len(rows) == 6000 and all(r["neutral"] is True for r in rows)
    assert _learned(rows) == {}


def test_a_home_advantage_makes_sided_matches_with_the_same_draws() -> None:
    neutral = list(synth_matches(*ARGS))
    level = list(synth_matches(*ARGS, home_advantage=0.0))
    assert level == [{k: v for k, v in r.items() if k != "neutral"} for r in neutral]
    home = list(synth_matches(*ARGS, home_advantage=150.0))
    assert all("neutral" not in r for r in home)
    assert [(r["a"], r["b"]) for r in home] == [(r["a"], r["b"]) for r in neutral]
    mean = sum(float(r["score"]) for r in home) / len(home)  # type: ignore[arg-type]
    assert mean > 0.55 > sum(float(r["score"]) for r in neutral) / len(neutral)  # type: ignore[arg-type]
    learned = _learned(home)
    assert set(learned) == {MATCH_SIDE} and learned[MATCH_SIDE] > 50
    assert abs(_learned(level)[MATCH_SIDE]) < learned[MATCH_SIDE] / 2


def test_the_command_writes_them(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    args = ["--kind", "matches", "--players", "50", "--matches", "100", "--out", str(out)]
    assert CliRunner().invoke(synth, args).exit_code == 0
    assert all(orjson.loads(line)["neutral"] is True for line in out.read_bytes().splitlines())
    assert CliRunner().invoke(synth, [*args, "--home-advantage", "80"]).exit_code == 0
    assert all("neutral" not in orjson.loads(line) for line in out.read_bytes().splitlines())
    assert "--home-advantage" in CliRunner().invoke(synth, ["--help"]).output
