"""Cowan's output units as schemas/rating.json and docs/interface.md state them: ``mu`` the posterior
mean in natural units, ``sigma`` its sd in display units (400/ln10 · sd), ``rating`` the mean in
display units (400/ln10 · mean + 1500). Checked against the moments of the belief's own grid."""

from __future__ import annotations

import json
import math

import numpy as np
from repo_paths import ROOT

from stream.ratings.cowan.system import Cowan

SCALE = 400 / math.log(10)


def test_cowan_mu_is_natural_and_sigma_and_rating_are_display_units() -> None:
    system = Cowan()
    beliefs = [system.new_belief() for _ in range(3)]
    a, b = np.array([0, 1, 0, 2], dtype=np.int64), np.array([1, 2, 2, 1], dtype=np.int64)
    beliefs = system.rate_matches(beliefs, a, b, np.array([1.0, 0.0, 0.5, 1.0]), np.arange(4, dtype=np.int64))
    for belief in [system.new_belief(), *beliefs]:
        lo, probs = system.window(belief)
        x = np.asarray(system.model.grid)[lo:lo + len(probs)]
        p = np.asarray(probs) / np.sum(probs)
        mean = float(np.sum(p * x))
        sd = math.sqrt(float(np.sum(p * (x - mean) ** 2)))
        r = system.summary(belief)
        assert math.isclose(r.mu, mean, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(r.sigma, SCALE * sd, rel_tol=1e-9)
        assert math.isclose(r.rating, SCALE * r.mu + 1500, rel_tol=1e-12)
    prior = system.summary(system.new_belief())
    assert abs(prior.mu) < 1e-9 and math.isclose(prior.sigma, SCALE * 0.7, rel_tol=1e-3)  # sigma0 = 0.7


def test_the_rating_schema_and_docs_state_the_units() -> None:
    props = json.loads((ROOT / "schemas" / "rating.json").read_text())["properties"]
    assert "NATURAL units" in props["mu"]["description"] and "cowan" in props["mu"]["description"]
    assert "400/ln10 · sd" in props["sigma"]["description"]
    for doc in ("interface.md", "matchmaker.md"):
        text = (ROOT / "docs" / doc).read_text()
        assert "natural units" in text and "400/ln10 · `mu` + 1500" in text, doc
