"""IndexedHeap and VictimHeap: order, re-keying, removal, and taking blocks all or nothing."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.indexed_heap import IndexedHeap
from kvtier.victim_heap import VictimHeap


def test_items_come_out_by_key_and_can_be_rekeyed_or_removed():
    heap = IndexedHeap()
    for item, key in [("a", 5), ("b", 1), ("c", 3), ("d", 4)]:
        heap.push(item, key)
    heap.push("a", 0)  # re-key up
    heap.push("b", 9)  # re-key down
    assert heap.remove("c") and not heap.remove("c")
    heap.check_integrity()
    assert ("c" not in heap, len(heap), heap.key_of("d")) == (True, 3, 4)
    assert [heap.pop() for _ in range(3)] == ["a", "d", "b"]


def test_items_are_never_compared():
    heap = IndexedHeap()
    heap.push(object(), (1, 0))
    heap.push(object(), (1, 1))
    heap.pop()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("push remove pop".split()), st.integers(0, 7), st.integers(0, 20))))
def test_the_heap_agrees_with_a_sorted_dict(ops):
    heap, model = IndexedHeap(), {}
    for op, item, key in ops:
        if op == "push":
            heap.push(item, (key, item))
            model[item] = (key, item)
        elif op == "remove":
            assert heap.remove(item) == (model.pop(item, None) is not None)
        elif model:
            smallest = min(model, key=model.get)
            assert heap.pop() == smallest
            del model[smallest]
        heap.check_integrity()
        assert len(heap) == len(model) and all(heap.key_of(i) == k for i, k in model.items())


def test_take_splits_the_last_victim_and_reports_blocks():
    heap = VictimHeap()
    heap.put("a", 1, 3)
    heap.put("b", 2, 2)
    assert heap.num_blocks == 5
    assert heap.take(4) == [("a", 3), ("b", 1)]  # taken items leave; the caller puts back what is left
    assert heap.num_blocks == 0 and len(heap) == 0
    heap.check_integrity()


def test_take_changes_nothing_when_it_cannot_succeed():
    heap = VictimHeap()
    heap.put("a", 1, 3)
    heap.put("b", 2, 2)
    assert heap.take(6) is None
    assert heap.take(4, admits=lambda item: item == "a") is None  # b refused: a is put back as it was
    assert (heap.num_blocks, heap.offered("a"), heap.key_of("a"), heap.take(0)) == (5, 3, 1, [])
    heap.put("b", 0, 0)  # no blocks: not a victim any more
    assert "b" not in heap and heap.num_blocks == 3
    heap.check_integrity()
