"""The worker's warm-up leaves nothing for its first batches to compile (``warm_encoded_path``)."""

from __future__ import annotations

import subprocess
import sys

# In a fresh process: in this one, other tests have run the decoders already.
_PROBE = """
import numba
from stream.engine.pool import PoolEngine
from stream.events.model import MatchBatch, MatchEvent
from stream.ratings import make_system
from stream.service.worker import warm_encoded_path
from stream.ratings import codec as codecs
from stream.ratings.cowan import codec as cowan_codec
from stream.ratings.cowan import quant as _cowan_quant

def signatures():
    out = {}
    for mod in (codecs, cowan_codec, _cowan_quant):
        for name, obj in vars(mod).items():
            if isinstance(obj, numba.core.registry.CPUDispatcher):
                out[f"{mod.__name__}.{name}"] = len(obj.signatures)
    return out

warm_encoded_path("cowan", {})
before = signatures()
system = make_system("cowan")
writer = PoolEngine("p", system)
batch = MatchBatch("p")
for i in range(40):
    batch.add(MatchEvent(event_id=f"m{i}", pool="p", time=i, a=f"a{i % 7}", b=f"b{i % 5}", score=1.0))
stored = dict(writer.apply_matches(batch, {}).updates)
reader = PoolEngine("p", system)  # a worker that did not write them: decodes what Redis holds
reader.apply_matches(batch, stored)
PoolEngine("p", system).decode_all(stored, ["a0"])  # one player's read (HTTP)
after = signatures()
new = {k: (before.get(k, 0), v) for k, v in after.items() if v != before.get(k, 0)}
print("compiled after warm-up:", new)
assert not new
"""


def test_warm_encoded_path_covers_the_decoders() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_warm_system_takes_a_pools_side_advantage_parameters() -> None:
    """A pools file written by ``mmr fit`` holds ``advantage*`` keys beside the system's: the warm-up
    builds the pool's system from its own keys (``make_pool_system``) and refuses a bad one of either."""
    import pytest

    from stream.ratings.base import RatingError
    from stream.service.worker import warm_system

    warm_system("elo", {"k": 20.0, "advantage_init_home": 30.0, "advantage_sd_home": 0.1}, set())
    bads: list[dict[str, object]] = [{"k": -1.0}, {"advantage_sd_home": -1.0}]
    for bad in bads:
        with pytest.raises(RatingError):
            warm_system("elo", bad, set())
