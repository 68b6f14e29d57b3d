"""Elo-MMR (Ebtekar & Liu, WWW'21) and Elo-MMχ: the system (``system``), its numba kernels
(``kernels``, teams in ``teams``), the plain oracles they are tested against (``naive``,
``teams_naive``) and the engine's batched forms (``fastpath``)."""
