"""The worker's warm-up leaves nothing for its first batches to compile (``warm_encoded_path``)."""

from __future__ import annotations

import subprocess
import sys

from numba_probe import compiled_after_warmup

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


_EVERY_PATH = """
import numpy as np
from stream.engine.embedded import EmbeddedPipeline
from stream.engine.pool import PoolEngine
from stream.events.model import MatchBatch, MatchEvent, RoundEvent
from stream.ratings.registry import SPECS
from stream.ratings.sided import make_pool_system

def round_of(pool, k, n):
    return RoundEvent(event_id=f"r{k}", pool=pool, round_id=f"r{k}", time=1000 + k,
                      players=[f"a{i}" for i in range(n)], ranks=np.arange(1, n + 1, dtype=np.int64))

for name, spec in SPECS.items():
    sizes = (5, 45, 300) if spec.multiplayer_rounds else (2,)
    pipe = EmbeddedPipeline(name, batch_size=64)  # the replay: matches, draws, rounds of each size
    for i in range(300):
        pipe.add("match", MatchEvent(event_id=f"m{i}", pool="p", time=i, a=f"a{i % 17}", b=f"b{i % 13}",
                                     score=(i % 3) / 2))
    for k, n in enumerate(sizes):
        pipe.add("round", round_of("p", k, n))
    list(pipe.final_ratings())
    system, _ = make_pool_system(name, {})
    stored = {}
    for k in range(2):  # the worker: what Redis holds, decoded by an engine that did not write it
        eng = PoolEngine("q", system)
        batch = MatchBatch("q")
        for i in range(200):
            batch.add(MatchEvent(event_id=f"m{k}-{i}", pool="q", time=k, a=f"a{i % 17}", b=f"b{i % 13}",
                                 score=(i % 3) / 2))
        stored.update(eng.apply_matches(batch, stored).updates)
        stored.update(eng.apply_round(round_of("q", k, sizes[-1]), stored).updates)
    PoolEngine("q", system).decode_all(stored, ["a0", "a1"])
"""


def test_warm_up_leaves_every_system_nothing_to_compile() -> None:
    """After ``mmr warm``'s warm-up (``warm_shared`` and each system's ``warm_system``), replaying
    matches with draws and rounds of several sizes, and the worker's apply on stored bytes, load no
    kernel of any system or of the shared stores (id index, packed and tagged pools) in a fresh process."""
    warm = """
    from stream.ratings.registry import SPECS
    from stream.service.worker import warm_shared, warm_system
    warm_shared()
    warmed = set()
    for name in SPECS:
        warm_system(name, {}, warmed)
    """
    assert compiled_after_warmup(warm, _EVERY_PATH) == {}
