"""The baseline systems of the papers' comparisons: Elo (online gradient descent), Glicko,
TrueSkill, Codeforces and TopCoder, one module each, with their shared kernels and fast path."""
