"""What ``mmr fit`` tunes offline is what runs live: a worker started with ``MMR_POOLS_FILE`` set to
the file fit wrote rates the pool with those parameters (its exported state equals the embedded
replay's with the same file, which differs from the defaults') and predicts with them (its HTTP
win probability is the fitted system's); a pool of team rounds with sides starts from every side's
learned belief the file carries (``advantage_init_<side>``, ``advantage_sd_<side>``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from home_matches import sided_round_lines
from service_utils import (
    MMR,
    ROOT,
    WorkerProcess,
    announced_port,
    embedded_state,
    export_state,
    http_get,
    make_settings,
    publish,
    stored_advantages,
    synth,
    wait_caught_up,
)

from stream.ratings import make_system
from stream.service.config import Settings
from stream.tools.common import load_pools_file

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SYSTEM = "trueskill"  # its prediction depends on the fitted parameters (β, τ), not on the ratings alone


def run_fit(history: Path, pools: Path, *args: str) -> dict[str, Any]:
    """``mmr fit HISTORY --out POOLS ARGS --json``'s object."""
    done = subprocess.run([str(MMR), "fit", str(history), "--out", str(pools), *args, "--json", "--no-progress"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    fitted: dict[str, Any] = json.loads(done.stdout)
    return fitted


@contextmanager
def worker_rating(history: Path, pools: Path, s: Settings, log: Path) -> Iterator[tuple[WorkerProcess, int]]:
    """A worker started with ``MMR_POOLS_FILE=pools`` once it has rated ``history`` (and its HTTP port)."""
    worker = WorkerProcess(s, log)
    worker.extra_env = {"MMR_POOLS_FILE": str(pools)}
    worker.start()
    try:
        port = announced_port(worker)
        publish([history], s)
        wait_caught_up(s, worker)
        yield worker, port
    finally:
        worker.stop()


def test_the_worker_rates_and_predicts_a_pool_with_the_parameters_fit_wrote(kafka_bootstrap: str, redis_url: str,
                                                                             tmp_path: Path) -> None:
    history = synth(tmp_path, "m.jsonl", "--kind", "matches", "--players", "50", "--rounds", "20", "--matches",
                    "1200", "--pool", "chess", "--seed", "9")
    pools = tmp_path / "pools.json"
    fitted = run_fit(history, pools, "--system", SYSTEM, "--trials", "4", "--min-history", "2", "--z", "0")
    configs = load_pools_file(str(pools))
    assert configs["chess"].system == SYSTEM and configs["chess"].params == fitted["params"]
    pool_systems = {name: (cfg.system, cfg.params) for name, cfg in configs.items()}
    expected = embedded_state([history], "elo", pool_systems=pool_systems)
    assert expected != embedded_state([history], SYSTEM)  # the fitted parameters change the ratings

    s = make_settings(kafka_bootstrap, redis_url)
    with worker_rating(history, pools, s, tmp_path / "worker.log") as (worker, port):
        state = export_state(s)
        assert state == expected, worker.log_tail()
        system, default = make_system(SYSTEM, fitted["params"]), make_system(SYSTEM)
        top = sorted(expected.values(), key=lambda r: r["rating"], reverse=True)
        a, b = top[0], top[-1]
        code, wp = http_get(port, f"/pools/chess/win-probability?a={a['player']}&b={b['player']}&neutral=true")
        assert code == 200, wp
        ba, bb = (np.array([r["mu"], r["sigma"], r["rounds"]], dtype=np.float64) for r in (a, b))
        assert wp["p_a"] == pytest.approx(system.win_probability(ba, bb), rel=1e-12, abs=0.0)
        assert wp["p_a"] != pytest.approx(default.win_probability(ba, bb), rel=1e-6, abs=0.0)


def test_a_pool_of_sided_team_rounds_starts_live_from_each_sides_learned_belief(kafka_bootstrap: str, redis_url: str,
                                                                                 tmp_path: Path) -> None:
    history = tmp_path / "sided.jsonl"
    history.write_text("\n".join(sided_round_lines(120.0, n=600)) + "\n")
    pools = tmp_path / "pools.json"
    fitted = run_fit(history, pools, "--system", "elo-mmr", "--trials", "3", "--min-history", "0")
    params = load_pools_file(str(pools))["league"].params
    assert params == fitted["params"] and params["advantage_init_home"] > 0 > params["advantage_init_away"]
    assert 0 < params["advantage_sd_home"] < 1  # the learned belief, narrower than the default prior
    expected_adv: dict[str, dict[bytes, bytes]] = {}
    expected = embedded_state([history], "elo", pool_systems={"league": ("elo-mmr", params)},
                              advantages=expected_adv)
    fresh = {k: v for k, v in params.items() if not k.startswith("advantage_")}
    assert expected != embedded_state([history], "elo", pool_systems={"league": ("elo-mmr", fresh)})

    s = make_settings(kafka_bootstrap, redis_url)
    with worker_rating(history, pools, s, tmp_path / "worker.log") as (worker, port):
        assert export_state(s) == expected, worker.log_tail()
        assert stored_advantages(s) == expected_adv  # the sides learned on from the file's priors, bit for bit
        code, pool = http_get(port, "/pools/league")
        assert code == 200, pool
        assert {k: pool["params"][k] for k in params if k.startswith("advantage_")} == \
            {k: v for k, v in params.items() if k.startswith("advantage_")}
