"""RoundAssembler's public lifecycle: open, dispatched and held, closed or forgotten."""

from __future__ import annotations

from typing import Any

import pytest

from stream.events.rounds import OpenRound, RoundAssembler
from stream.events.validate import InvalidEvent


def _result(rid: str, player: str, rank: int) -> dict[str, Any]:
    return {"type": "round_result", "event_id": f"{rid}-{player}", "pool": "p", "round_id": rid, "time": 5,
            "player": player, "rank": rank}


def _completed(rid: str, n: int) -> dict[str, Any]:
    return {"type": "round_completed", "event_id": f"{rid}-done", "pool": "p", "round_id": rid, "time": 9,
            "participants": n}


def test_a_held_round_is_late_until_closed_and_assembled_again_once_forgotten() -> None:
    asm = RoundAssembler(close_on_dispatch=False)
    assert asm.add_result(_result("r", "a", 1), 0) is None
    assert asm.open_rounds() == [OpenRound("p", "r", 1, None, 0)] and len(asm) == 1
    assert asm.add_completed(_completed("r", 2), 0) is None
    ev = asm.add_result(_result("r", "b", 2), 0)
    assert ev is not None and ev.players == ["a", "b"] and len(asm) == 0
    assert not asm.is_closed("p", "r")  # held: its rating is not durable yet
    with pytest.raises(InvalidEvent, match="late event"):
        asm.add_result(_result("r", "c", 3), 0)
    asm.forget("p", "r")  # its rating failed: the same events assemble it again
    assert asm.add_result(_result("r", "a", 1), 1) is None
    assert asm.add_completed(_completed("r", 2), 1) is None
    again = asm.add_result(_result("r", "b", 2), 1)
    assert again is not None and again.players == ev.players and again.event_id == ev.event_id
    asm.close("p", "r")
    assert asm.is_closed("p", "r")
    with pytest.raises(InvalidEvent, match="late event"):
        asm.add_result(_result("r", "c", 3), 2)


def test_by_default_a_dispatched_round_is_closed() -> None:
    asm = RoundAssembler()
    asm.add_result(_result("r", "a", 1), 0)
    assert asm.add_completed(_completed("r", 1), 0) is not None
    assert asm.is_closed("p", "r")
    asm.clear()
    assert not asm.is_closed("p", "r") and asm.open_rounds() == []


def test_a_clock_stepping_back_does_not_open_a_round_before_the_latest_time_seen() -> None:
    asm = RoundAssembler()
    asm.add_result(_result("late", "a", 1), 500)
    asm.add_result(_result("early", "a", 1), 100)  # the clock stepped back
    assert [(r.round_id, r.first_seen) for r in asm.open_rounds()] == [("late", 500), ("early", 500)]
    assert asm.first_seen("p", "early") == 500 and asm.first_seen("p", "gone") is None
    assert asm.close_expired("p", "late") == "round timed out with 1/? results" and asm.is_closed("p", "late")


def test_a_held_round_gives_its_event_ids_in_arrival_order_once_each() -> None:
    asm = RoundAssembler(close_on_dispatch=False)
    asm.add_result(_result("r", "a", 1), 0)
    asm.add_completed(_completed("r", 2), 0)
    asm.add_result(_result("r", "a", 1), 0)  # repeated: ignored
    assert asm.knows("p", "r") and asm.is_open("p", "r")
    assert asm.add_result(_result("r", "b", 2), 0) is not None
    assert not asm.is_open("p", "r") and asm.knows("p", "r")
    assert asm.dispatched_ids("p", "r") == ["r-a", "r-done", "r-b"]
    asm.close("p", "r")
    assert asm.dispatched_ids("p", "r") == []
