"""The examples in examples/ run as documented against a real broker: the game server publishes
every game it plays, as events the worker's validator accepts, and stops cleanly on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys

import orjson
import pytest
from service_utils import ROOT, env_for, make_settings, read_topic

from stream.events.validate import decode_event

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

GAME_SERVER = ROOT / "examples" / "game_server.py"


def test_the_game_server_publishes_each_game_as_a_valid_match(kafka_bootstrap: str) -> None:
    s = make_settings(kafka_bootstrap, "redis://127.0.0.1:1/0")  # publishing never touches Redis
    done = subprocess.run([sys.executable, str(GAME_SERVER), "--pool", "example-arena", "--games", "120",
                           "--players", "12"], env=env_for(s), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "done: 120 games published to pool 'example-arena'" in done.stdout
    games = []
    for key, value in read_topic(s, s.topic_matches):
        obj = orjson.loads(value)
        if obj.get("pool") != "example-arena":
            continue
        etype, ev = decode_event(obj)
        assert etype == "match" and key == b"example-arena"
        games.append(ev)
    assert len(games) == 120
    assert len({g.event_id for g in games}) == 120
    assert {g.score for g in games} <= {0.0, 0.5, 1.0}


def test_the_game_server_stops_cleanly_on_ctrl_c(kafka_bootstrap: str) -> None:
    s = make_settings(kafka_bootstrap, "redis://127.0.0.1:1/0")
    proc = subprocess.Popen([sys.executable, str(GAME_SERVER), "--pool", "example-sigint", "--games", "0",
                             "--rate", "200"], env=env_for(s), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the first hundred games are out: the publisher is running
        assert "games published" in line
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
