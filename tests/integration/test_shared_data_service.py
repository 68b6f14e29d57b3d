"""Real histories through the service: ../shared/data streamed into a worker (skipped when absent).

The synthetic histories of test_service.py are small and regular; the real ones are not. The
football history holds 49,520 matches of 337 teams from 1872 to 2026 (long gaps, 11,258
draws, teams that played once); the first 100 Codeforces rounds hold 52,195 results of 8,657
contestants, up to 1,657 in a round, with ties. Both go the whole way (``mmr replay
--broker``'s publisher, Kafka, the worker, Redis), and the final state must equal the
embedded replay bit for bit, as on synthetic data. The worker's Redis steps are bounded to
500 players (``MMR_MAX_STEP_PLAYERS``), so most takes are applied as several steps: where
a take is cut changes nothing either.
"""

from __future__ import annotations

import lzma
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from service_utils import (
    WorkerProcess,
    announced_port,
    export_state,
    make_settings,
    pool_systems,
    publish,
    read_json_topic,
    wait_caught_up,
)

from stream.engine.embedded import EmbeddedPipeline
from stream.events.inputs import read_records

pytestmark = [pytest.mark.integration, pytest.mark.data, pytest.mark.timeout(600)]

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CODEFORCES = DATA / "codeforces" / "contests-2010-2020.jsonl.xz"
FOOTBALL = DATA / "football" / "results.csv"
CONTESTS = 100


@pytest.mark.skipif(not (CODEFORCES.exists() and FOOTBALL.exists()),
                    reason=f"shared data absent: {CODEFORCES} or {FOOTBALL} (needs ../shared/data)")
def test_real_histories_through_the_service_equal_the_embedded_replay(kafka_bootstrap: str, redis_url: str,
                                                                      tmp_path: Path) -> None:
    contests = tmp_path / "cf.jsonl"
    with lzma.open(CODEFORCES, "rb") as fh:
        contests.write_bytes(b"".join(line for _, line in zip(range(CONTESTS), fh, strict=False)))
    inputs = [(contests, "cf", "elo-mmr"), (FOOTBALL, "football", "cowan")]

    pipe = EmbeddedPipeline("elo-mmr", {}, pool_systems={pool: (system, {}) for _, pool, system in inputs})
    for path, pool, _ in inputs:
        pipe.run(read_records(path, pool))
    expected: dict[tuple[str, str], dict[str, Any]] = {(r["pool"], r["player"]): r for r in pipe.final_ratings()}

    s = make_settings(kafka_bootstrap, redis_url, pools=pool_systems({pool: system for _, pool, system in inputs}),
                      max_step_players=500)
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    try:
        port = announced_port(worker)
        for path, pool, _ in inputs:
            publish([path], s, pool=pool, batch_size=1000)
        wait_caught_up(s, worker, timeout=400)
        state = export_state(s)
        assert read_json_topic(s, s.topic_dead) == []
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        worker.stop()
    steps = {kind: float(n) for kind, n in re.findall(r'^mmr_batches_total\{kind="(\w+)"\} (\S+)$', metrics, re.M)}
    assert steps["rounds"] >= 50, steps  # 100 rounds of 5-1,657 players, most of them alone in a step
    assert {k[0] for k in state} == {"cf", "football"}
    assert len(state) == len(expected)
    differ = sorted(k for k in expected if state.get(k) != expected[k])
    assert not differ, f"{len(differ)} players differ; first: {[(k, state.get(k), expected[k]) for k in differ[:3]]}"
