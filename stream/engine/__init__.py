"""The pipeline core shared by the embedded replay and the streaming worker.

event → validate (stream.events) → batch → kernel (stream.ratings) → state (stream.state)
→ publish. ``PoolEngine`` is the pure middle: given decoded events and the *encoded*
beliefs currently stored, it returns the encoded beliefs to store and the rating
outputs to publish. Transport (files / Kafka) and storage (memory / Redis) wrap it.
"""

from stream.engine.pool import Applied, PoolEngine

__all__ = ["Applied", "PoolEngine"]
