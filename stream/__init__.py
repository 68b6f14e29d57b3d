"""mmr-stream: a streaming skill-rating service (Elo-MMR, Cowan's system, baselines)."""

__version__ = "0.1.0"
