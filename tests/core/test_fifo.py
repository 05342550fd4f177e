"""The queue's Fifo against a plain list: same items, same order, same length, whatever
the mix of push, push_front, pop and clear (length is a counter kept by hand)."""

from hutch.core.fifo import Fifo


def check(fifo, model):
    assert fifo.length == len(model) == len(fifo)
    assert list(fifo) == model
    assert fifo.peek() == (model[0] if model else None)


def test_fifo_matches_a_list_through_every_operation():
    fifo, model = Fifo(), []
    state = 12345
    for step in range(3000):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF  # the same numbers under MicroPython
        op = state % 10
        if op < 5:
            fifo.push(step)
            model.append(step)
        elif op < 8:
            assert fifo.pop() == (model.pop(0) if model else None)
        elif op == 8:
            items = [-step, -step - 1][: state % 3]
            fifo.push_front(items)
            model[:0] = items
        elif state % 7 == 0:
            assert fifo.clear() == model
            model = []
        check(fifo, model)
    while model:
        assert fifo.pop() == model.pop(0)
    check(fifo, model)
    assert fifo.pop() is None
