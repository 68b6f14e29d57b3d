"""The pipeline core shared by the embedded replay and the streaming worker: ``PoolEngine``, pure,
wrapped by transport (files / Kafka) and storage (memory / Redis)."""

from stream.engine.pool import Applied, PoolEngine

__all__ = ["Applied", "PoolEngine"]
