"""``mmr synth --kind matches``: neutral matches from a model without a side advantage, and with
``--home-advantage H`` matches whose first player is at home, from which a pool learns the advantage."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from stream.engine.embedded import EmbeddedPipeline
from stream.events.validate import decode_event
from stream.ratings.advantage import MATCH_SIDE
from stream.tools.synth import synth, synth_matches

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
