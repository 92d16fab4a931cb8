"""sieve/defenses/memo.py: the batch memo every per-document or per-query cache fills through."""
from __future__ import annotations

from collections import OrderedDict

from sieve.defenses import memo


class Owner:
    pass


def test_fill_computes_only_missing_keys_in_one_call_and_keeps_order() -> None:
    store: OrderedDict = OrderedDict()
    calls: list[list[int]] = []
    owner = Owner()

    def compute(todo: list[int]) -> list[str]:
        calls.append(todo)
        return [keys[i].upper() for i in todo]

    keys = ["a", "b"]
    assert memo.fill(store, 10, keys, owner, compute) == ["A", "B"]
    keys = ["c", "a", "d"]
    assert memo.fill(store, 10, keys, owner, compute) == ["C", "A", "D"]
    assert calls == [[0, 1], [0, 2]]          # "a" was not computed again


def test_fill_recomputes_for_another_owner_and_evicts_the_oldest() -> None:
    store: OrderedDict = OrderedDict()
    first, second = Owner(), Owner()
    memo.fill(store, 2, ["x", "y"], first, lambda todo: [1 for _ in todo])
    # the same key held for another owner (an id reused after the first was freed) is computed again
    assert memo.fill(store, 2, ["x"], second, lambda todo: [2 for _ in todo]) == [2]
    memo.fill(store, 2, ["z"], second, lambda todo: [3 for _ in todo])
    # entries leave in the order they were first inserted (a refreshed key keeps its place)
    assert list(store) == ["y", "z"] and store["z"] == (second, 3)
