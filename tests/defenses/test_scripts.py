"""Script labels, mixed-script fraction, adjacent transitions and the RSG integrity predicate (§3.3, §4.4)."""
import pytest

from sieve.defenses.scripts import (
    adjacent_transitions,
    ascii_tokens,
    integrity_predicate,
    mixed_script_fraction,
    script_label,
    script_profile,
)


@pytest.mark.parametrize("ch,label", [
    ("a", "LATIN"), ("é", "LATIN"), ("д", "CYRILLIC"), ("α", "GREEK"), ("ا", "ARABIC"), ("ש", "HEBREW"),
    ("क", "DEVANAGARI"), ("ก", "THAI"), ("中", "EAST_ASIAN"), ("あ", "EAST_ASIAN"), ("カ", "EAST_ASIAN"),
    ("한", "EAST_ASIAN"), ("ა", "GEORGIAN"), ("ա", "ARMENIAN"), ("1", None), (" ", None), ("-", None),
])
def test_script_label(ch, label):
    assert script_label(ch) == label


def test_script_label_other():
    assert script_label("ሀ") == "OTHER"   # Ethiopic: alphabetic, none of the listed scripts


def test_ascii_tokens_casefold_and_split():
    assert ascii_tokens("Café au LAIT, 42x") == ["caf", "au", "lait", "42x"]
    assert ascii_tokens("Москва") == []


def test_mixed_script_fraction():
    assert mixed_script_fraction("abcд") == pytest.approx(0.25)
    assert mixed_script_fraction("abc 123 !!") == 0.0
    assert mixed_script_fraction("123 ...") == 0.0
    assert mixed_script_fraction("ab дд") == pytest.approx(0.5)


def test_adjacent_transitions():
    assert adjacent_transitions("iPhone手机") == 1
    assert adjacent_transitions("abc дд ef") == 0           # the space breaks adjacency
    assert adjacent_transitions("pаris") == 2               # Cyrillic а inside a Latin word
    assert adjacent_transitions("漢字かな") == 0            # kanji + kana are both EAST_ASIAN
    assert adjacent_transitions("a1д") == 0                 # a digit breaks adjacency


def test_integrity_predicate_rules():
    assert integrity_predicate("plain english text") == 0
    assert integrity_predicate("iPhone手机") == 1           # adjacency
    assert integrity_predicate("hello мир κόσμος") == 1     # three scripts separated by spaces
    assert integrity_predicate("hello мир") == 0            # two scripts, no adjacency
    prof = script_profile("hello мир κόσμος")
    assert prof.scripts == ["CYRILLIC", "GREEK", "LATIN"] and prof.transitions == 0
