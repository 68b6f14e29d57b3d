"""The embedded pipeline and `mmr replay --embedded`: docs/interface.md output, bad input, idempotence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner, Result

from stream.engine.embedded import EmbeddedPipeline
from stream.events.inputs import InputError, read_records
from stream.tools.replay import replay

MMR = [sys.executable, "-m", "stream.cli"]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _contests() -> list[dict[str, object]]:
    return [
        {"name": "c1", "time_seconds": 1000, "standings": [["a", 0, 0], ["b", 1, 1], ["c", 2, 2]]},
        {"name": "c2", "time_seconds": 2000, "standings": [["c", 0, 0], ["a", 1, 2], ["d", 1, 2]]},
    ]


def _run(paths: list[Path], system: str = "elo-mmr", **kw: object) -> dict[tuple[str, str], dict[str, object]]:
    pipe = EmbeddedPipeline(system, **kw)  # type: ignore[arg-type]
    for p in paths:
        pipe.run(read_records(p))
    pipe.flush()
    return {(r["pool"], r["player"]): r for r in pipe.final_ratings()}


def test_replay_writes_contract_jsonl(tmp_path: Path) -> None:
    src = _write(tmp_path / "c.jsonl", _contests())
    out = tmp_path / "ratings.jsonl"
    res = CliRunner().invoke(
        replay, [str(src), "--system", "elo-mmr", "--embedded", "--out", str(out), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {r["player"] for r in rows} == {"a", "b", "c", "d"}
    for r in rows:
        assert set(r) == {"pool", "player", "rating", "mu", "sigma", "rounds"}
        assert r["pool"] == "default"
    by = {r["player"]: r for r in rows}
    assert by["a"]["rounds"] == 2 and by["b"]["rounds"] == 1
    # the three-newcomer reference values of the Elo-MMR reference implementation (first round only affects b)
    assert by["b"]["mu"] == pytest.approx(1500.0, abs=0.01)


def test_bad_input_exits_nonzero_names_file_and_line_and_writes_nothing(tmp_path: Path) -> None:
    rows = _contests()
    rows.append({"name": "bad", "time_seconds": 3000, "standings": [["a", 0, 0], ["a", 1, 1]]})
    src = _write(tmp_path / "bad.jsonl", rows)
    out = tmp_path / "ratings.jsonl"
    proc = subprocess.run(
        [*MMR, "replay", str(src), "--system", "elo-mmr", "--embedded", "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert f"{src}:3" in proc.stderr and "twice" in proc.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]  # no temporary left behind either


def test_unknown_system_and_parameter_are_errors(tmp_path: Path) -> None:
    src = _write(tmp_path / "c.jsonl", _contests())
    for args in (["--system", "nope"], ["--param", "bogus=1"]):
        res = CliRunner().invoke(replay, [str(src), "--embedded", "--no-progress", *args])
        assert res.exit_code != 0
        assert "unknown" in res.output


def _matches(n: int) -> list[dict[str, object]]:
    players = ["p1", "p2", "p3", "p4", "p5"]
    rows: list[dict[str, object]] = []
    for i in range(n):
        a, b = players[i % 5], players[(i * 3 + 1) % 5]
        if a == b:
            b = players[(i + 2) % 5]
        rows.append(
            {
                "type": "match",
                "event_id": f"m{i}",
                "pool": "duel",
                "time": 1000 * i,
                "a": a,
                "b": b,
                "score": [1.0, 0.0, 0.5][i % 3],
            }
        )
    return rows


@pytest.mark.parametrize("system", ["cowan", "elo-mmr"])
def test_batch_size_does_not_change_results(tmp_path: Path, system: str) -> None:
    src = _write(tmp_path / "m.jsonl", _matches(60))
    one = _run([src], system, batch_size=1)
    many = _run([src], system, batch_size=4096)
    assert one == many  # exact sequential meaning: bit-identical floats


@pytest.mark.parametrize("system", ["elo-mmr", "elo-mmx"])
def test_packed_store_gives_the_bits_of_the_array_store(tmp_path: Path, system: str) -> None:
    """The embedded store keeps Elo-MMR beliefs packed (raw float64 bytes; no array per player
    and round); the same history through arrays gives the same bits. Rounds with ties, a round
    that changes nothing, and matches of the same pool (rated through arrays) included."""
    from stream.events.inputs import read_records
    from stream.state.packed_pool import PackedPool
    from stream.tools.synth import synth_rounds

    contests = list(synth_rounds(40, 12, 0.5, seed=3))
    contests.append({"name": "solo", "time_seconds": 1_700_000_000, "standings": [["lonely", 0, 0]]})
    rounds = _write(tmp_path / "r.jsonl", contests)
    duels = [{**m, "pool": "default", "a": f"P{m['a']}", "b": f"P{m['b']}"} for m in _matches(30)]
    duels += [{**m, "event_id": f"x{i}", "b": contests[0]["standings"][i][0]}  # type: ignore[index]
              for i, m in enumerate(duels[:5])]
    matches = _write(tmp_path / "m.jsonl", duels)

    def run(packed: bool) -> tuple[list[dict[str, object]], list[tuple[str, str, bytes]]]:
        pipe = EmbeddedPipeline(system, batch_size=7)
        assert pipe.engine("default").packed
        pipe.engine("default").packed = packed
        for path in (rounds, matches):
            pipe.run(read_records(path))
        pipe.flush()
        held = {type(b) for _, _, b in pipe.store.items()}
        assert held == ({bytes} if packed else {np.ndarray})
        assert isinstance(pipe.store.beliefs["default"], PackedPool) == packed  # packed: one arena
        return list(pipe.final_ratings()), [(q, p, b.tobytes()) for q, p, b in pipe.beliefs()]

    packed, arrays = run(True), run(False)
    assert packed == arrays
    assert {r["player"] for r in packed[0]} >= {"lonely", "Pp1", contests[0]["standings"][0][0]}  # type: ignore[index]


def test_replaying_the_same_events_twice_changes_nothing(tmp_path: Path) -> None:
    src = _write(tmp_path / "m.jsonl", _matches(30))
    assert _run([src, src], "cowan") == _run([src], "cowan")


def test_round_from_results_equals_whole_round(tmp_path: Path) -> None:
    whole = _write(
        tmp_path / "w.jsonl",
        [
            {
                "type": "round",
                "event_id": "done",
                "pool": "p",
                "round_id": "r",
                "time": 5,
                "standings": [{"player": "a", "rank": 2}, {"player": "b", "rank": 1}, {"player": "c", "rank": 2}],
            }
        ],
    )
    parts = [
        {"type": "round_result", "event_id": f"r-{p}", "pool": "p", "round_id": "r", "time": 1, "player": p, "rank": k}
        for p, k in (("a", 2), ("b", 1), ("c", 2))
    ]
    parts.insert(
        1, {"type": "round_completed", "event_id": "done", "pool": "p", "round_id": "r", "time": 5, "participants": 3}
    )
    pieces = _write(tmp_path / "r.jsonl", parts)
    assert _run([pieces]) == _run([whole])


def test_invalid_event_in_stream_is_reported_with_location(tmp_path: Path) -> None:
    rows = _matches(3)
    rows[2]["score"] = 7
    src = _write(tmp_path / "m.jsonl", rows)
    with pytest.raises(InputError, match=r"m\.jsonl:3: .*score"):
        _run([src], "cowan")


@pytest.mark.parametrize(
    "system", ["elo-mmr", "elo-mmx", "cowan", "elo", "glicko", "trueskill", "codeforces", "topcoder"]
)
def test_a_round_that_changes_nothing_still_lists_its_players_in_every_system(system: str) -> None:
    """A round of one player (Cowan raised 'rates only two-player rounds (got 1)' and stopped
    the replay) or of players all tied changes no belief, but docs/interface.md's ``--out`` lists
    "the final rating of every player": newcomers are listed at the prior with rounds 0, and a
    player already rated keeps the rating unchanged."""
    from stream.events.model import RoundEvent
    from stream.ratings import make_system

    def rnd(eid: str, t: int, players: list[str], ranks: list[int]) -> RoundEvent:
        return RoundEvent(event_id=eid, pool="p", round_id=eid, time=t, players=players,
                          ranks=np.array(ranks, dtype=np.int64))

    pipe = EmbeddedPipeline(system)
    pipe.add("round", rnd("r1", 0, ["solo"], [1]))
    pipe.flush()
    sysm = make_system(system)
    prior = sysm.summary(sysm.new_belief())
    want = {"pool": "p", "player": "solo", "rating": prior.rating, "mu": prior.mu, "sigma": prior.sigma, "rounds": 0}
    assert list(pipe.final_ratings()) == [want]
    if system == "cowan":  # rates two-player rounds only
        pipe.add("round", rnd("r2", 1, ["solo", "x"], [1, 2]))
    else:
        pipe.add("round", rnd("r2", 1, ["solo", "x", "y"], [1, 2, 3]))
    pipe.flush()
    rated = {r["player"]: r for r in pipe.final_ratings()}
    assert rated["solo"]["rounds"] == 1
    if system == "cowan":  # a tie of two is a draw, which Cowan rates
        return
    pipe.add("round", rnd("r3", 2, ["solo", "x", "tied"], [1, 1, 1]))
    pipe.flush()
    final = {r["player"]: r for r in pipe.final_ratings()}
    assert final == {**rated, "tied": {**want, "player": "tied"}}


def test_round_results_delivered_again_are_duplicates_like_in_the_service(tmp_path: Path) -> None:
    """The service records a round's result ids as applied; the embedded replay called a
    second copy of the same file a 'late event' and exited with status 2."""
    parts = [
        {"type": "round_result", "event_id": f"r-{p}", "pool": "p", "round_id": "r", "time": 1, "player": p, "rank": k}
        for p, k in (("a", 2), ("b", 1), ("c", 2))
    ]
    parts.append({"type": "round_completed", "event_id": "done", "pool": "p", "round_id": "r", "time": 5,
                  "participants": 3})
    src = _write(tmp_path / "r.jsonl", parts)
    once = _run([src])
    assert _run([src, src]) == once and once[("p", "a")]["rounds"] == 1
    # a different result for the rated round is still late (invalid)
    late = _write(tmp_path / "late.jsonl", [{**parts[0], "event_id": "other", "player": "z"}])
    with pytest.raises(InputError, match="late"):
        _run([src, late])


def test_rounds_incomplete_at_end_of_input_are_reported_not_dropped_silently(tmp_path: Path) -> None:
    """The service dead-letters such rounds (``round timed out with k/n results``); the embedded
    replay dropped them without a word. Now each is named on stderr with its counts and the
    location of its first event, the exit code stays 0 and the ratings are unchanged."""
    rated = [
        {"type": "round", "event_id": "w1", "pool": "p", "round_id": "whole", "time": 1,
         "standings": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}]},
    ]
    base = _write(tmp_path / "base.jsonl", rated)
    dangling = [
        *rated,
        # results whose round_completed never comes (line 2 is its first event)
        {"type": "round_result", "event_id": "x-a", "pool": "p", "round_id": "no-completion", "time": 2,
         "player": "a", "rank": 1},
        {"type": "round_result", "event_id": "x-c", "pool": "p", "round_id": "no-completion", "time": 3,
         "player": "c", "rank": 2},
        # a completion expecting 3 results of which 1 arrives (line 4 is its first event)
        {"type": "round_completed", "event_id": "y-done", "pool": "q", "round_id": "short", "time": 4,
         "participants": 3},
        {"type": "round_result", "event_id": "y-a", "pool": "q", "round_id": "short", "time": 5,
         "player": "a", "rank": 1},
    ]
    src = _write(tmp_path / "dangling.jsonl", dangling)
    runner = CliRunner()
    args = ["--system", "elo-mmr", "--embedded", "--no-progress", "--top", "5"]
    ok = runner.invoke(replay, [str(base), "--out", str(tmp_path / "base.out"), *args])
    res = runner.invoke(replay, [str(src), "--out", str(tmp_path / "dangling.out"), *args])
    assert ok.exit_code == 0 and res.exit_code == 0, res.output
    assert res.stdout == ok.stdout  # the leaderboard is unchanged
    assert (tmp_path / "dangling.out").read_bytes() == (tmp_path / "base.out").read_bytes()
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 2, res.stderr
    assert f"{src}:2" in lines[0] and "'p'" in lines[0] and "'no-completion'" in lines[0]
    assert "2/? results" in lines[0]  # the expected count is unknown without a round_completed
    assert f"{src}:4" in lines[1] and "'q'" in lines[1] and "'short'" in lines[1] and "1/3 results" in lines[1]
    assert all("incomplete" in ln for ln in lines)
    assert "warning:" not in ok.stderr


def test_incomplete_rounds_of_the_pipeline_and_rounds_spanning_files(tmp_path: Path) -> None:
    """A round whose results and completion are in different files of one replay is rated, not
    reported; only what is still open after the last record is."""
    parts = [
        {"type": "round_result", "event_id": f"r-{p}", "pool": "p", "round_id": "r", "time": 1, "player": p, "rank": k}
        for p, k in (("a", 1), ("b", 2))
    ]
    first = _write(tmp_path / "first.jsonl", parts)
    last = _write(tmp_path / "last.jsonl", [{"type": "round_completed", "event_id": "done", "pool": "p",
                                             "round_id": "r", "time": 5, "participants": 2}])
    pipe = EmbeddedPipeline("elo-mmr")
    pipe.run(read_records(first))
    (open_round,) = pipe.incomplete_rounds()
    assert (open_round.pool, open_round.round_id, open_round.results, open_round.expected) == ("p", "r", 2, None)
    assert open_round.where == f"{first}:1"
    pipe.run(read_records(last))
    assert pipe.incomplete_rounds() == []
    assert {r["player"]: r["rounds"] for r in pipe.final_ratings()} == {"a": 1, "b": 1}


def test_replay_help_documents_incomplete_rounds() -> None:
    res = CliRunner().invoke(replay, ["--help"])
    assert res.exit_code == 0 and "incomplete" in res.output


def test_ratings_driven_out_of_range_are_located_errors_not_tracebacks_or_nan(tmp_path: Path) -> None:
    """Absurd parameters: ``elo`` with a learning rate and start rating of 1e308 ends in infinite
    and NaN ratings (written out they would be JSON null), TrueSkill with sigma 1e200 overflows
    inside its update (a RatingError of the last batch, which escaped as a traceback, exit 1).
    Both are errors that name the player or the file and line, exit 2 and write nothing. A
    parameter that is not finite (``k=inf``) is refused before anything is rated."""
    src = _write(tmp_path / "m.jsonl", _matches(40))
    out = tmp_path / "ratings.jsonl"

    def run(*args: str) -> Result:
        return CliRunner().invoke(replay, [str(src), "--embedded", "--no-progress", "--out", str(out), *args])

    res = run("--system", "elo", "--param", "k=1e308", "--param", "init=1e308")  # finite, but they overflow
    assert res.exit_code == 2, res.output
    assert "not finite" in res.output and "player 'p" in res.output
    res = run("--system", "elo", "--param", "k=inf")  # refused before anything is rated
    assert res.exit_code == 2, res.output
    assert "invalid EloParams parameter(s): k=inf" in res.output
    res = run("--system", "trueskill", "--param", "sigma=1e200")
    assert res.exit_code == 2, res.output
    assert f"{src}:1: event m0" in res.output and "trueskill cannot rate" in res.output
    assert not out.exists()
    res = run("--system", "elo")  # the same input with sane parameters
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("system", ["cowan", "elo"])
def test_match_runs_rate_like_one_match_at_a_time(tmp_path: Path, system: str) -> None:
    """Runs of plain match lines (``read_records(..., chunks=True)``) give the final ratings
    of reading line by line, with duplicates inside a run, across runs and after a flush,
    two pools interleaved, a round and lines of unusual (valid) form; a bad line is named by
    its line either way."""
    import stream.events.inputs as inputs

    rows = _matches(40)
    rows[7] = {**rows[7], "pool": "other"}
    rows[8] = {**rows[8], "pool": "other"}
    rows[12] = dict(rows[3])  # a duplicate of a match rated in an earlier batch
    rows[13] = dict(rows[12])  # and again, inside the same run
    rows[20] = {**rows[20], "score": 1}  # an int score: still a plain match
    rows[25] = {**rows[25], "extra": [1]}  # unknown fields are allowed
    rows.insert(30, {"type": "round", "event_id": "r1", "pool": "default", "round_id": "r1", "time": 5,
                     "standings": [{"player": "p1", "rank": 1}, {"player": "p9", "rank": 2}]})
    path = _write(tmp_path / "m.jsonl", rows)

    def final(chunks: bool) -> list[dict[str, object]]:
        pipe = EmbeddedPipeline(system, batch_size=6)
        pipe.run(read_records(path, chunks=chunks))
        return list(pipe.final_ratings())

    old = inputs.CHUNK_LINES
    inputs.CHUNK_LINES = 9
    try:
        assert final(True) == final(False)
    finally:
        inputs.CHUNK_LINES = old
    bad = _write(tmp_path / "bad.jsonl", [*rows[:20], {**rows[20], "a": "p1", "b": "p1"}])
    for chunks in (True, False):
        with pytest.raises(InputError, match=rf"{bad}:21: "):
            EmbeddedPipeline(system).run(read_records(bad, chunks=chunks))


def test_the_collector_is_held_back_during_an_embedded_replay_and_restored_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mmr replay --embedded`` rates with the objects of start-up frozen out of the collector
    and a large young generation (``fewer_collections``), and gives the thresholds back
    afterwards, also when the replay stops on bad input (the CLI runs in-process here)."""
    import gc

    from stream.tools import replay as replay_module

    during: list[tuple[tuple[int, int, int], int]] = []
    real_run = EmbeddedPipeline.run

    def run(self: EmbeddedPipeline, records: object, on_invalid: object = None) -> None:
        during.append((gc.get_threshold(), gc.get_freeze_count()))
        real_run(self, records, on_invalid)  # type: ignore[arg-type]

    monkeypatch.setattr(EmbeddedPipeline, "run", run)
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    src = _write(tmp_path / "m.jsonl", [{"type": "match", "pool": "p", "event_id": "e1", "time": 1, "a": "x",
                                         "b": "y", "score": 1.0}])
    bad = _write(tmp_path / "bad.jsonl", [{"type": "match", "pool": "p", "event_id": "e2"}])
    for path, code in ((src, 0), (bad, 2)):
        result = CliRunner().invoke(replay, [str(path), "--system", "cowan", "--embedded", "--no-progress",
                                             "--out", str(tmp_path / "r.jsonl")])
        assert result.exit_code == code, result.output
        (young, *_), frozen = during[-1]
        assert young == replay_module.GC_YOUNG and frozen > 0
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_engine_leaves_the_team_predictions_unimported_until_a_team_is_predicted() -> None:
    """Every replay and worker imports the engine; only team rounds need the lobby (scipy, Elo-MMR's kernels)."""
    code = ("import sys; import stream.engine.embedded; "
            "print(sorted(m for m in ('stream.ratings.lobby', 'scipy.special') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
