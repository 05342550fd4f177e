"""Ctrl-C inside a task (ports/interrupt.py): the task ends as a finished task, its cleanup
runs, and the stop is asked for.

On a board the interrupt is raised in whatever task runs. MicroPython's asyncio never
finishes a task that a KeyboardInterrupt left, and cancel() does not wake it again, so a
shutdown that awaited such a bridge task waited for ever. Here the interrupt is raised where
it would land, inside the task's coroutine. Plain functions and asserts: run_micropython.py
runs them under MicroPython too, where an unguarded task's KeyboardInterrupt would end the
whole run.
"""

import asyncio

from hutch.ports.interrupt import guarded


async def _forwarding(cleaned):
    try:
        await asyncio.sleep(0)
        raise KeyboardInterrupt  # what Ctrl-C raises in the task that runs at that moment
    finally:
        cleaned.append("in flight back to the queue")


def test_ctrl_c_in_a_guarded_task_finishes_it_and_asks_for_the_stop():
    stops = []
    cleaned = []

    async def main():
        task = asyncio.create_task(guarded(_forwarding(cleaned), lambda: stops.append("stop")))
        await asyncio.sleep(0.01)
        task.cancel()  # what the shutdown does to a bridge's task, and then awaits it
        await task

    asyncio.run(main())
    assert stops == ["stop"]
    assert cleaned == ["in flight back to the queue"]


def test_ctrl_c_in_a_guarded_task_is_raised_again_when_nobody_stops():
    raised = []

    async def main():
        try:
            await guarded(_forwarding([]), None)
        except KeyboardInterrupt:
            raised.append("KeyboardInterrupt")

    asyncio.run(main())
    assert raised == ["KeyboardInterrupt"]


def test_a_guarded_task_returns_what_its_coroutine_returns():
    async def answer():
        await asyncio.sleep(0)
        return 42

    async def main():
        return await asyncio.create_task(guarded(answer(), None))

    assert asyncio.run(main()) == 42
