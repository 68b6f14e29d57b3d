"""mmr-stream: a streaming skill-rating service (Elo-MMR, Cowan's system, baselines).

Importing it has no side effects: numba is configured where kernels are needed
(``stream.runtime.configure``)."""

__version__ = "0.1.0"
