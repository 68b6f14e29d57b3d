"""MMR_REDIS_MIN_REPLICAS / MMR_REDIS_WAIT_TIMEOUT_MS: parsed, checked, and passed to the store."""

from __future__ import annotations

import pytest

from stream.config import SettingError
from stream.service.config import from_env


def test_min_replicas_default_is_auto_and_a_count_is_kept() -> None:
    assert from_env({}).replication_kwargs() == {"min_replicas": None, "wait_timeout_ms": 1000}
    s = from_env({"MMR_REDIS_MIN_REPLICAS": "2", "MMR_REDIS_WAIT_TIMEOUT_MS": "250"})
    assert s.replication_kwargs() == {"min_replicas": 2, "wait_timeout_ms": 250}
    assert from_env({"MMR_REDIS_MIN_REPLICAS": "0"}).replication_kwargs()["min_replicas"] == 0


@pytest.mark.parametrize(("name", "raw"), [("MMR_REDIS_MIN_REPLICAS", "-2"), ("MMR_REDIS_WAIT_TIMEOUT_MS", "0")])
def test_out_of_range_values_are_refused(name: str, raw: str) -> None:
    with pytest.raises(SettingError, match=name):
        from_env({name: raw})
