"""Ctrl-C on MicroPython, which has no signal module.

The interrupt is raised as KeyboardInterrupt in whatever code runs at that moment: in the
event loop's wait for sockets (then it leaves asyncio.run, and `hutch serve` runs the loop
again to shut down), or inside one of its tasks. A task that the exception ends is never
finished as far as MicroPython's asyncio knows: cancel() does not schedule it again, so a
shutdown that awaits it waits for ever (`hutch serve` hung after Ctrl-C while a bridge was
forwarding). So every task a shutdown awaits catches the interrupt itself and asks for the
broker's stop instead (on_interrupt: `hutch serve`'s stop event).

On CPython `hutch serve` turns SIGINT into that stop event directly; nothing is raised.
"""


def interrupted(on_interrupt):
    """A KeyboardInterrupt caught in a task: hand it to on_interrupt, or raise it again if
    nobody asked for it (a broker run without `hutch serve`)."""
    if on_interrupt is None:
        raise KeyboardInterrupt
    on_interrupt()


async def guarded(coro, on_interrupt):
    """Await coro as the body of a task that Ctrl-C ends as a finished task: the interrupt
    unwinds coro (its finally clauses run) and becomes a request to stop."""
    try:
        return await coro
    except KeyboardInterrupt:
        interrupted(on_interrupt)
