"""The ``reason`` label of ``mmr_dead_letters_total`` is one of a few kinds, whatever the input."""

from __future__ import annotations

from prometheus_client import generate_latest

from stream.service.metrics import REASON_LABELS, Metrics, reason_label


def _series(m: Metrics) -> set[str]:
    return {s.labels["reason"] for fam in m.registry.collect() if fam.name == "mmr_dead_letters"
            for s in fam.samples if s.name == "mmr_dead_letters_total"}


def test_three_thousand_field_paths_make_one_series() -> None:
    m = Metrics()
    for i in range(3000):
        m.dead_letters.labels(reason_label(f"field matches.{i}.a: must be string")).inc()
    assert _series(m) == {"field"}
    assert m.registry.get_sample_value("mmr_dead_letters_total", {"reason": "field"}) == 3000
    assert len(generate_latest(m.registry)) < 20_000


def test_every_reason_the_worker_writes_has_a_fixed_kind() -> None:
    reasons = {
        "bad JSON: unexpected character: line 1 column 1 (char 0)": "json",
        "an event must be a JSON object": "json",
        "field type: unknown event type 'x'": "field",
        "field standings: player 'p' appears twice in the round": "field",
        "unknown pool 'kc}:p:x'": "unknown_pool",
        "pool config: pool 'x': its stored system 'elo-2030' is refused": "pool_config",
        "rating: player 'p0': stored value is not a belief": "rating",
        "round 'r1' has more results than the maximum 10": "round",
        "round 'r1': round timed out with 2/3 results": "round",
        "internal error (see worker log)": "internal",
        "something new": "other",
    }
    m = Metrics()
    for reason, kind in reasons.items():
        assert reason_label(reason) == kind, reason
        m.dead_letters.labels(reason_label(reason)).inc()
        for name in ("p", "q", "kc}:p:x", "r" * 300):  # pool, player and round names never reach the label
            m.dead_letters.labels(reason_label(reason.replace("'p'", repr(name)))).inc()
    assert _series(m) <= REASON_LABELS and len(_series(m)) == len(set(reasons.values()))
