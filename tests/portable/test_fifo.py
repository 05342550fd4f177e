"""The queue's Fifo against a plain list: same items, same order, same length, whatever
the mix of push, put_back, pop and clear (length is a counter kept by hand)."""

from hutch.core.fifo import Fifo


def check(fifo, model):
    assert fifo.length == len(model) == len(fifo)
    assert list(fifo) == model
    assert fifo.peek() == (model[0] if model else None)


def place(model, item):
    """Where put_back puts item in a list in order: before the first greater one."""
    i = 0
    while i < len(model) and model[i] < item:
        i += 1
    model.insert(i, item)


def test_fifo_matches_a_list_through_every_operation():
    fifo, model = Fifo(), []
    taken = []  # popped items, which put_back may return (numbers: their own key)
    state = 12345
    for step in range(3000):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF  # the same numbers under MicroPython
        op = state % 10
        if op < 5:
            fifo.push(step)
            model.append(step)
        elif op < 8:
            item = fifo.pop()
            assert item == (model.pop(0) if model else None)
            if item is not None:
                taken.append(item)
        elif op == 8:
            count = state % 4
            back = [taken.pop((state >> 4) % len(taken)) for _ in range(min(count, len(taken)))]
            fifo.put_back(back, lambda item: item)
            for item in back:
                place(model, item)
        elif state % 7 == 0:
            assert fifo.clear() == model
            model = []
        check(fifo, model)
    while model:
        assert fifo.pop() == model.pop(0)
    check(fifo, model)
    assert fifo.pop() is None


def test_put_back_returns_items_to_their_places_among_the_rest():
    fifo = Fifo()
    for item in range(10):
        fifo.push(item)
    taken = [fifo.pop() for _ in range(6)]  # 0..5 out; 6..9 left
    fifo.put_back([taken[4], taken[1]], lambda item: item)
    assert list(fifo) == [1, 4, 6, 7, 8, 9]
    fifo.put_back([taken[5], taken[0], taken[2]], lambda item: item)
    assert list(fifo) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert fifo.length == 9
    fifo.put_back([], lambda item: item)
    assert fifo.length == 9
