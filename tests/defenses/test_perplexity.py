"""Perplexity filter: clean-only calibration and removal of an unfluent passage."""
from __future__ import annotations

import math

import numpy as np
import pytest

from _tris_fakes import ranking_of, resources_with
from sieve.defenses.perplexity import NotCalibratedError
from sieve.models.tiny import UnigramLM
from sieve.registry import DEFENSES
from sieve.types import Document

CORPUS = ["the capital of france is paris", "paris is a city in france", "the river seine flows through paris",
          "france is a country in europe", "the eiffel tower is in paris", "europe has many old cities",
          "the city of paris has many museums", "the louvre is a museum in paris", "a river flows through the city",
          "many people visit france"]
GIBBERISH = "zxqv blorf wug snarf plimth qorx vrund"


def _res():
    return resources_with(lm=UnigramLM(CORPUS))


def _ppl(lm: UnigramLM, text: str) -> float:
    return math.exp(float(np.mean(np.asarray(lm.token_nll(text)[1], np.float64))))


def test_requires_calibration():
    with pytest.raises(NotCalibratedError, match="calibrate"):
        DEFENSES.create("perplexity").inspect(ranking_of("q", CORPUS[:3]), _res())


def test_calibrate_on_clean_rankings_then_remove_gibberish():
    res = _res()
    clean = [ranking_of("q1", CORPUS[:5]), ranking_of("q2", CORPUS[5:])]
    ppl = DEFENSES.create("perplexity").calibrate(clean, res, clean_budget=0.05)
    # 10 clean scores, budget 5% -> index floor(0.5) = 0 -> the largest clean perplexity (next float up)
    top = max(_ppl(res.lm, t) for t in CORPUS)
    assert ppl.threshold == np.nextafter(top, np.inf) and ppl.threshold_ == ppl.threshold
    out = ppl.apply(ranking_of("q", CORPUS[:4] + [GIBBERISH]), res)
    assert out.removed_ids == ["d4"]
    d = out.decisions[4]
    assert d.score == pytest.approx(_ppl(res.lm, GIBBERISH)) and d.score > d.threshold
    assert d.evidence["mean_nll"] == pytest.approx(math.log(d.score))
    assert out.decisions[0].score == pytest.approx(_ppl(res.lm, CORPUS[0]))


def test_fit_clean_on_passages_and_short_text_unavailable():
    res = _res()
    ppl = DEFENSES.create("perplexity").fit_clean([Document(f"c{i}", t) for i, t in enumerate(CORPUS)], res)
    assert ppl.threshold == np.nextafter(max(_ppl(res.lm, t) for t in CORPUS), np.inf)
    out = ppl.apply(ranking_of("q", ["paris", GIBBERISH]), res)
    assert out.decisions[0].status == "unavailable" and not out.decisions[0].removed
    assert out.removed_ids == ["d1"]
