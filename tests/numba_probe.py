"""Which numba kernels a piece of code compiles after a warm-up, asked of a fresh process.

In the test process, other tests may have compiled most kernels already, so a warm-up that misses
one would go unseen there. The child starts as a worker does (``runtime.configure``, the cache
the tests use), runs ``warm``, counts the signatures of every numba dispatcher of ``stream``,
runs ``calls`` and reports the dispatchers that gained one: compiled, or loaded from the cache,
inside what should have found it ready.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PROBE = """
import json, sys
from stream import runtime
runtime.configure()
import numba

def signatures():
    out = {}
    for name, mod in list(sys.modules.items()):
        if name == "stream" or name.startswith("stream."):
            for attr, obj in list(vars(mod).items()):
                if isinstance(obj, numba.core.registry.CPUDispatcher):
                    out[f"{obj.__module__}.{obj.__name__}"] = len(obj.signatures)
    return out

WARM
warmed = signatures()
CALLS
after = signatures()
print(json.dumps({k: [warmed.get(k, 0), v] for k, v in after.items() if v != warmed.get(k, 0)}))
"""


def compiled_after_warmup(warm: str, calls: str) -> dict[str, list[int]]:
    """``{dispatcher: [signatures after warm, after calls]}`` for each one ``calls`` added to."""
    code = _PROBE.replace("WARM", textwrap.dedent(warm)).replace("CALLS", textwrap.dedent(calls))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    found: dict[str, list[int]] = json.loads(out.stdout.strip().splitlines()[-1])
    return found
