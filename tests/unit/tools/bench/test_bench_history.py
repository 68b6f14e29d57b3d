"""``mmr bench service --history``: what it publishes and counts (the timed part needs a worker)."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pytest

from stream.service.config import Settings
from stream.tools.bench.history import POOL, history_messages


def _jsonl(path: Path, events: list[dict[str, object]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return str(path)


def _round(k: int, players: list[str]) -> dict[str, object]:
    return {"type": "round", "event_id": f"r{k}", "pool": "x", "round_id": f"{k}", "time": k,
            "standings": [{"player": p, "rank": i + 1} for i, p in enumerate(players)]}


def _match(k: int) -> dict[str, object]:
    return {"type": "match", "event_id": f"m{k}", "pool": "x", "time": k, "a": "a", "b": "b", "score": 1.0}


def test_rounds_count_their_standings_and_go_to_the_rounds_topic(tmp_path: Path) -> None:
    s = Settings()
    path = _jsonl(tmp_path / "r.jsonl", [_round(0, ["a", "b", "c"]), _round(1, ["a", "d"])])
    topic, items, results = history_messages(path, s)
    assert (topic, len(items), results) == (s.topic_rounds, 2, 5)
    assert all(key == POOL.encode() and orjson.loads(v)["pool"] == POOL for key, v in items)


def test_matches_are_batched_as_replay_publishes_them(tmp_path: Path) -> None:
    s = Settings()
    topic, items, results = history_messages(_jsonl(tmp_path / "m.jsonl", [_match(k) for k in range(5000)]), s)
    assert (topic, len(items), results) == (s.topic_matches, 2, 5000)  # 4,096 + 904


def test_a_history_of_two_kinds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(click.ClickException, match="one kind"):
        history_messages(_jsonl(tmp_path / "mixed.jsonl", [_round(0, ["a", "b"]), _match(1)]), Settings())


def test_the_replay_phase_needs_a_history() -> None:
    """``--only replay`` (``mmr replay --broker`` into the worker beside ``--embedded``) is refused
    before anything starts when there is no file to replay."""
    from click.testing import CliRunner

    from stream.tools.bench.service import bench_service

    res = CliRunner().invoke(bench_service, ["--only", "replay"])
    assert res.exit_code == 2 and "--only replay need --history FILE" in res.output


def test_the_replay_phase_compares_the_workers_final_state_with_the_embedded_output(
        tmp_path: Path, redis_url: str) -> None:
    """``differing_rows``: equal rows count no player; a rating, a count of rounds or a player
    present on one side only each count one (the pools are named differently on the two sides)."""
    import asyncio
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from stream.engine.embedded import EmbeddedPipeline
    from stream.events.inputs import read_records
    from stream.service.processor import Message, Processor
    from stream.state.redis_store import RedisStore
    from stream.tools.bench.worker import differing_rows

    rounds = [_round(k, ["a", "b", "c", "d"][k % 2:]) for k in range(4)]
    s = Settings(redis_url=redis_url, key_prefix=f"bh{uuid.uuid4().hex[:6]}", system="elo-mmr")

    async def into_redis() -> None:
        store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix)
        msgs = [Message("r", 0, k, orjson.dumps({**r, "pool": "worker-pool"})) for k, r in enumerate(rounds)]
        with ThreadPoolExecutor(1) as ex:
            await Processor(s, store, ex).process(msgs)
        await store.close()

    asyncio.run(into_redis())
    pipe = EmbeddedPipeline("elo-mmr", {})
    pipe.run(read_records(_jsonl(tmp_path / "r.jsonl", rounds), "embedded-pool"))
    rows = list(pipe.final_ratings())
    out = tmp_path / "embedded.jsonl"

    def differing(changed: list[dict[str, object]]) -> tuple[int, int]:
        out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in changed))
        return differing_rows(out, s, "worker-pool")

    assert differing(rows) == (4, 0)
    assert differing([{**rows[0], "rating": rows[0]["rating"] + 1e-9}, *rows[1:]]) == (4, 1)
    assert differing([*rows[:-1], {**rows[-1], "rounds": rows[-1]["rounds"] + 1}]) == (4, 1)
    assert differing(rows[1:]) == (3, 1)


def test_ratio_floor_is_the_other_processes_cpu_over_the_cores_and_the_embedded_wall() -> None:
    """The floor: CPU of the embedded replay, Redis, the broker and the publisher, spread over every
    core, against the embedded wall; unknown (None, no text) when one of them was not measured."""
    import os

    from stream.tools.bench.history import floor_text, ratio_floor

    cores = len(os.sched_getaffinity(0))
    run: dict[str, object] = {"embedded_s": 10.0, "embedded_cpu_s": 12.0, "redis_cpu_s": 5.0, "broker_cpu_s": 2.0,
           "publisher_cpu_s": 1.0, "machine_busy": 0.8}
    assert ratio_floor(run) == pytest.approx(20.0 / cores / 10.0)
    run["ratio_floor"] = ratio_floor(run)
    assert f"floor {20.0 / cores / 10.0:.2f}x" in floor_text(run) and "80 % busy" in floor_text(run)
    assert ratio_floor({**run, "broker_cpu_s": None}) is None
    assert floor_text({**run, "ratio_floor": None}) == ""


def test_the_replay_runs_are_summed_up_by_their_median_and_range() -> None:
    """Several runs: the median and range of the ratios and of both walls; one run: nothing to add."""
    from stream.tools.bench.history import replay_summary

    runs = [{"ratio": r, "worker_s": w, "embedded_s": e}
            for r, w, e in ((1.5, 30.0, 20.0), (1.3, 26.0, 20.0), (1.9, 28.5, 15.0))]
    assert replay_summary(runs) == ("3 runs: ratio median 1.50 (1.30–1.90)x, worker 28.5 (26.0–30.0) s, "
                                    "embedded 20.0 (15.0–20.0) s")
    assert replay_summary(runs[:1]) == ""


def test_worker_env_options_are_laid_over_the_bench_workers_environment(tmp_path: Path) -> None:
    """``--worker-env KEY=VALUE``: a setting for the bench's worker alone, laid over its own environment
    (the first ``=`` ends the key); an option without ``=`` is refused before anything starts."""
    from click.testing import CliRunner

    from stream.tools.bench.service import bench_service, parse_worker_env
    from stream.tools.bench.worker import worker_environment

    extra = parse_worker_env(("MMR_NUMBA_THREADS=1", "MMR_LOG_LEVEL=info", "X=a=b"))
    assert extra == {"MMR_NUMBA_THREADS": "1", "MMR_LOG_LEVEL": "info", "X": "a=b"}
    env = worker_environment(Settings(), 4321, tmp_path / "pools.json", extra)
    assert env["MMR_NUMBA_THREADS"] == "1" and env["X"] == "a=b" and env["MMR_LOG_LEVEL"] == "info"
    assert env["MMR_HTTP_PORT"] == "4321" and env["MMR_POOLS_FILE"] == str(tmp_path / "pools.json")
    assert "X" not in worker_environment(Settings(), 4321, tmp_path / "pools.json")
    res = CliRunner().invoke(bench_service, ["--worker-env", "MMR_NUMBA_THREADS"])
    assert res.exit_code == 2 and "expected KEY=VALUE" in res.output


def test_the_worker_threads_are_listed_busiest_first_and_idle_ones_left_out() -> None:
    from stream.tools.bench.history import threads_text

    threads = {"main": {"on_core_s": 4.04, "waiting_for_core_s": 1.3, "asleep_s": 8.4},
               "mmr-numba": {"on_core_s": 8.0, "waiting_for_core_s": 1.25, "asleep_s": 4.5},
               "mmr-health": {"on_core_s": 0.01, "waiting_for_core_s": 0.0, "asleep_s": 13.0}}
    assert threads_text(threads) == ("mmr-numba 8.0 on a core / 1.2 waiting for one / 4.5 asleep, "
                                     "main 4.0 on a core / 1.3 waiting for one / 8.4 asleep")
    assert threads_text({}) == ""
