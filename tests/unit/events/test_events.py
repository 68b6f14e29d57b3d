"""Validation, decoding and input reading: bad input is rejected with a precise reason."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import orjson
import pytest

from stream.events.inputs import InputError, contest_to_round, detect_format, read_records
from stream.events.rounds import RoundAssembler
from stream.events.validate import InvalidEvent, decode_event, parse_json


def _round(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "type": "round",
        "event_id": "r1",
        "pool": "p",
        "round_id": "1",
        "time": 5,
        "standings": [{"player": "a", "rank": 1}, {"player": "b", "rank": 2}, {"player": "c", "rank": 2}],
    }
    base.update(kw)
    return base


def test_round_decodes_with_ties() -> None:
    etype, ev = decode_event(_round())
    assert etype == "round"
    assert ev.players == ["a", "b", "c"]
    assert ev.ranks.tolist() == [1, 2, 2]
    assert ev.weight == 1.0


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        (_round(standings=[{"player": "a", "rank": 1}, {"player": "a", "rank": 2}]), "appears twice"),
        (_round(pool="x" * 129), "pool"),
        (_round(standings=[{"player": "", "rank": 1}]), "standings"),
        (_round(weight=0), "weight"),
        (_round(time="soon"), "time"),
        ({"type": "bogus", "event_id": "e"}, "unknown event type"),
        ({"type": "match", "event_id": "m", "pool": "p", "time": 1, "a": "x", "b": "x", "score": 1}, "themself"),
        ({"type": "match", "event_id": "m", "pool": "p", "time": 1, "a": "x", "b": "y", "score": 2}, "score"),
        ({"type": "match", "event_id": "m", "pool": "p", "time": 1, "a": "x", "score": 1}, "b"),
    ],
)
def test_invalid_events_name_the_field(obj: dict[str, object], needle: str) -> None:
    with pytest.raises(InvalidEvent) as err:
        decode_event(obj)
    assert needle in str(err.value)


@pytest.mark.parametrize("raw", [b'{"x": NaN}', b'{"x": 1e400}', b"[1, 2]", b"{not json"])
def test_bad_json_and_non_finite_numbers_are_rejected(raw: bytes) -> None:
    with pytest.raises(InvalidEvent):
        parse_json(raw)


def test_contest_line_becomes_round_with_tie_ranges() -> None:
    ev = contest_to_round(
        {"name": "c1", "time_seconds": 100, "standings": [["x", 0, 1], ["y", 0, 1], ["z", 2, 2]]}, "f:1", "d", 1
    )
    assert ev.ranks.tolist() == [1, 1, 3]
    assert ev.time == 100_000
    assert ev.pool == "d"


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"standings": [["x", 0, 0], ["x", 1, 1]]}, "twice"),
        ({"standings": [["x", 0, 5]]}, "rank range"),
        ({"standings": [["x", 0, 0]], "weight": -1}, "weight"),
        ({"standings": [[1, 0, 0]]}, "player"),
        ({"standings": [["x", 0, 0]], "time_seconds": 1e17}, "time_seconds"),
    ],
)
def test_bad_contest_lines(obj: dict[str, object], needle: str) -> None:
    with pytest.raises(InputError) as err:
        contest_to_round(obj, "f.jsonl:3", "d", 3)
    assert "f.jsonl:3" in str(err.value) and needle in str(err.value)


def test_formats_detected_by_content_and_compression(tmp_path: Path) -> None:
    contest = orjson.dumps({"name": "c", "time_seconds": 1, "standings": [["a", 0, 0], ["b", 1, 1]]}) + b"\n"
    event = (
        orjson.dumps({"type": "match", "event_id": "1", "pool": "p", "time": 1, "a": "a", "b": "b", "score": 0.5})
        + b"\n"
    )
    (tmp_path / "c.jsonl.xz").write_bytes(lzma.compress(contest))
    (tmp_path / "e.jsonl.gz").write_bytes(gzip.compress(event))
    (tmp_path / "m.csv").write_text("date,home_team,away_team,home_score,away_score\n2000-01-02,A,B,2,2\n")
    assert detect_format(tmp_path / "c.jsonl.xz") == "contests"
    assert detect_format(tmp_path / "e.jsonl.gz") == "events"
    assert detect_format(tmp_path / "m.csv") == "csv"
    ((_, t, r),) = read_records(tmp_path / "c.jsonl.xz")
    assert t == "round" and r.players == ["a", "b"]
    ((_, t, m),) = read_records(tmp_path / "e.jsonl.gz")
    assert t == "match" and m.score == 0.5
    ((where, t, m),) = read_records(tmp_path / "m.csv")
    assert where.endswith("m.csv:2") and m.a == "A" and m.score == 0.5 and m.time == 946771200000


def test_bad_line_reports_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "e.jsonl"
    good = {"type": "match", "event_id": "1", "pool": "p", "time": 1, "a": "a", "b": "b", "score": 1}
    p.write_bytes(orjson.dumps(good) + b"\n\n" + b'{"type": "match", "event_id": "2"}\n')
    with pytest.raises(InputError) as err:
        list(read_records(p))
    assert f"{p}:3" in str(err.value)


def _result(rid: str, player: str, rank: int, eid: str | None = None) -> dict[str, object]:
    return {
        "type": "round_result",
        "event_id": eid or f"{rid}-{player}",
        "pool": "p",
        "round_id": rid,
        "time": 1,
        "player": player,
        "rank": rank,
    }


def _completed(rid: str, n: int) -> dict[str, object]:
    return {
        "type": "round_completed",
        "event_id": f"{rid}-done",
        "pool": "p",
        "round_id": rid,
        "time": 9,
        "participants": n,
    }


def test_round_assembly_waits_for_completion_and_all_results() -> None:
    asm = RoundAssembler()
    assert asm.add_result(_result("r", "a", 2), 0) is None
    assert asm.add_completed(_completed("r", 2), 0) is None
    assert asm.add_result(_result("r", "a", 2), 0) is None  # duplicate delivery ignored
    ev = asm.add_result(_result("r", "b", 1), 0)
    assert ev is not None and ev.event_id == "r-done" and ev.time == 9
    assert dict(zip(ev.players, ev.ranks.tolist(), strict=True)) == {"a": 2, "b": 1}
    with pytest.raises(InvalidEvent, match="already rated"):
        asm.add_result(_result("r", "c", 3), 0)


def test_round_assembly_rejects_double_player_and_too_many() -> None:
    asm = RoundAssembler(max_participants=3)
    asm.add_result(_result("r", "a", 1), 0)
    with pytest.raises(InvalidEvent, match="already has a result"):
        asm.add_result(_result("r", "a", 2, eid="other"), 0)
    with pytest.raises(InvalidEvent, match="exceeds the maximum"):
        asm.add_completed(_completed("q", 4), 0)


def test_times_and_ranks_beyond_int64_are_invalid_on_both_paths(tmp_path: Path) -> None:
    """Larger values passed validation and then crashed the pipeline (OverflowError)."""
    from stream.engine.embedded import EmbeddedPipeline
    from stream.events.validate import fast_matches

    big = 2**63
    match = {"type": "match", "event_id": "e", "pool": "p", "time": big, "a": "x", "b": "y", "score": 1}
    item = {k: match[k] for k in ("event_id", "time", "a", "b", "score")}
    batch = {"type": "match_batch", "pool": "p", "matches": [item]}
    for obj in (match, batch):
        assert fast_matches(obj) is None
        with pytest.raises(InvalidEvent, match=r"field .*time"):
            decode_event(obj)
    with pytest.raises(InvalidEvent, match="time"):
        decode_event(_round(time=big))
    with pytest.raises(InvalidEvent, match="rank"):
        decode_event(_round(standings=[{"player": "a", "rank": 1}, {"player": "b", "rank": big}]))
    result = {"type": "round_result", "event_id": "e", "pool": "p", "round_id": "r", "time": 1, "player": "a"}
    with pytest.raises(InvalidEvent, match="rank"):
        decode_event({**result, "rank": big})
    # the largest allowed values still rate
    path = tmp_path / "ok.jsonl"
    path.write_bytes(
        orjson.dumps({**match, "time": big - 1})
        + b"\n"
        + orjson.dumps(_round(time=big - 1, standings=[{"player": "a", "rank": 1}, {"player": "b", "rank": big - 1}]))
        + b"\n"
    )
    for system in ("elo-mmr", "cowan"):
        pipe = EmbeddedPipeline(system)
        records = [r for r in read_records(path) if system == "elo-mmr" or r[1] == "match"]
        pipe.run(records)
        assert len(list(pipe.final_ratings())) >= 2


def test_csv_time_beyond_int64_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("date,home_team,away_team,home_score,away_score\n2000-01-01,a,b,1,0\n" + "9" * 20 + ",a,b,1,0\n")
    with pytest.raises(InputError) as err:
        list(read_records(path))
    assert f"{path}:3" in str(err.value) and "time" in str(err.value)


def test_contests_sharing_a_name_are_all_rated(tmp_path: Path) -> None:
    """The event id was ``contest:<name>``: a second contest of the same name was a 'duplicate'."""
    from stream.engine.embedded import EmbeddedPipeline

    one = tmp_path / "one.jsonl"
    two = tmp_path / "two.jsonl"
    one.write_bytes(orjson.dumps({"name": "R1", "time_seconds": 1, "standings": [["a", 0, 0], ["b", 1, 1]]}) + b"\n")
    two.write_bytes(orjson.dumps({"name": "R1", "time_seconds": 2, "standings": [["c", 0, 0], ["d", 1, 1]]}) + b"\n")
    pipe = EmbeddedPipeline("elo-mmr")
    pipe.run([*read_records(one), *read_records(two), *read_records(one)])  # the same file again: no-op
    rounds = {r["player"]: r["rounds"] for r in pipe.final_ratings()}
    assert rounds == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert [r[2].event_id for r in read_records(one)] == [r[2].event_id for r in read_records(one)]


def test_csv_with_utf8_byte_order_mark(tmp_path: Path) -> None:
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbfdate,home_team,away_team,home_score,away_score\n2001-05-06,A,B,0,1\n")
    ((_, t, m),) = read_records(p)
    assert t == "match" and m.a == "A" and m.score == 0.0


def _contest(name: str, players: tuple[str, str] = ("a", "b")) -> dict[str, object]:
    return {"name": name, "time_seconds": 1, "standings": [[players[0], 0, 0], [players[1], 1, 1]]}


def _wire_round(ev: object) -> dict[str, object]:
    """The ``round`` message ``mmr replay --broker`` publishes for a contest (stream.tools.publish)."""
    from stream.events.model import RoundEvent

    assert isinstance(ev, RoundEvent)
    return {"type": "round", "event_id": ev.event_id, "pool": ev.pool, "round_id": ev.round_id, "time": ev.time,
            "standings": [{"player": p, "rank": int(r)} for p, r in zip(ev.players, ev.ranks.tolist(), strict=True)]}


def test_long_contest_names_give_ids_within_the_schema_limits() -> None:
    """A contest name over ~231 characters made ``contest:<name>:<digest>`` longer than the
    schemas' 256-character event_id (and, over 256, the round_id): the service dead-lettered it."""
    MAX_EVENT_ID_LENGTH = MAX_ROUND_ID_LENGTH = 256  # maxLength in schemas/round.json

    long_name = "Codeforces Round " + "x" * 283
    assert len(long_name) == 300
    ev = contest_to_round(_contest(long_name), "f:1", "d", 1)
    assert len(ev.event_id) <= MAX_EVENT_ID_LENGTH and len(ev.round_id) <= MAX_ROUND_ID_LENGTH
    assert ev.round_id.startswith("Codeforces Round xxx") and ev.event_id.startswith("contest:Codeforces Round xxx")
    assert decode_event(_wire_round(ev))[1].event_id == ev.event_id  # the service accepts it
    # deterministic: the same line gives the same ids
    again = contest_to_round(_contest(long_name), "g:7", "d", 7)
    assert (again.event_id, again.round_id) == (ev.event_id, ev.round_id)
    # two long names sharing their first 280 characters stay distinct
    other = contest_to_round(_contest(long_name[:-1] + "y"), "f:2", "d", 2)
    assert other.round_id != ev.round_id and other.event_id != ev.event_id
    assert len(other.event_id) <= MAX_EVENT_ID_LENGTH and len(other.round_id) <= MAX_ROUND_ID_LENGTH
    # an explicit "id" is bounded the same way
    by_id = contest_to_round({**_contest("short"), "id": "i" * 400}, "f:3", "d", 3)
    assert len(by_id.round_id) <= MAX_ROUND_ID_LENGTH and len(by_id.event_id) <= MAX_EVENT_ID_LENGTH


@pytest.mark.parametrize("length", [1, 200, 231, 232, 256, 257])
def test_contest_ids_that_fit_are_unchanged_and_every_length_is_accepted(length: int) -> None:
    """Ids of names that already fit are exactly what they were (``contest:<name>:<digest of the
    line>``, round id = name), so re-publishing an old history is still recognised as duplicates."""
    import hashlib

    from stream.events.inputs import MAX_EVENT_ID_LENGTH, MAX_ROUND_ID_LENGTH

    name = "n" * length
    line = orjson.dumps(_contest(name)).decode()
    ev = contest_to_round(orjson.loads(line), "f:1", "d", 1, line)
    digest = hashlib.blake2b(line.encode(), digest_size=8).hexdigest()
    if length <= MAX_EVENT_ID_LENGTH - len("contest:") - 1 - len(digest):  # 231
        assert ev.event_id == f"contest:{name}:{digest}"
    if length <= MAX_ROUND_ID_LENGTH:
        assert ev.round_id == name
    assert len(ev.event_id) <= MAX_EVENT_ID_LENGTH and len(ev.round_id) <= MAX_ROUND_ID_LENGTH
    decode_event(_wire_round(ev))


def test_id_limits_of_the_reader_are_the_schemas() -> None:
    from stream.events.inputs import MAX_EVENT_ID_LENGTH, MAX_ROUND_ID_LENGTH
    from stream.events.validate import schema

    for kind in ("round", "round_result", "round_completed", "match"):
        props = schema(kind)["properties"]
        assert props["event_id"]["maxLength"] == MAX_EVENT_ID_LENGTH
        if "round_id" in props:
            assert props["round_id"]["maxLength"] == MAX_ROUND_ID_LENGTH


def test_long_contest_names_are_rated_as_distinct_rounds(tmp_path: Path) -> None:
    from stream.engine.embedded import EmbeddedPipeline

    prefix = "z" * 290
    src = tmp_path / "long.jsonl"
    src.write_bytes(b"".join(orjson.dumps(_contest(prefix + s, pl)) + b"\n"
                             for s, pl in (("-A", ("a", "b")), ("-B", ("c", "d")))))
    rounds = [r[2] for r in read_records(src)]
    assert len({r.round_id for r in rounds}) == 2 and len({r.event_id for r in rounds}) == 2
    pipe = EmbeddedPipeline("elo-mmr")
    pipe.run(read_records(src))
    assert {r["player"]: r["rounds"] for r in pipe.final_ratings()} == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_csv_match_ids_stay_within_the_limit_for_long_file_names(tmp_path: Path) -> None:
    """CSV match ids are ``<file name>:<line>``; a file name near the file system's 255 bytes
    made them longer than the schema's event_id."""
    MAX_EVENT_ID_LENGTH = 256  # maxLength in schemas/match.json

    body = "date,home_team,away_team,home_score,away_score\n2000-01-02,A,B,2,2\n2000-01-03,A,B,1,2\n"
    long = tmp_path / ("m" * 251 + ".csv")  # 255 characters, the usual NAME_MAX
    long.write_text(body)
    ids = [m.event_id for _, _, m in read_records(long)]
    assert len(set(ids)) == 2 and all(len(i) <= MAX_EVENT_ID_LENGTH for i in ids)
    assert all(i.startswith("mmmm") for i in ids)
    short = tmp_path / "s.csv"
    short.write_text(body)
    assert [m.event_id for _, _, m in read_records(short)] == ["s.csv:2", "s.csv:3"]  # unchanged
