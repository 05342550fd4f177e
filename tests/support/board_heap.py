"""What the board tests share: a board's broker stopped as a board is (Ctrl-C), its log checked,
and the heap figures its stats lines give.
"""

import re

from brokers import interrupt_between_collections, wait_until


def stop_board(board):
    try:
        interrupt_between_collections(board)  # Ctrl-C: MicroPython has no signal module
    finally:
        board.stop()
    assert not board.errors(), "broker logged errors:\n" + around_first_error(board.log())
    assert "MemoryError" not in board.log(), board.log()[-5000:]


def around_first_error(log):
    """The log from a few lines before its first error or traceback (the stats lines a small
    heap writes every second would push it out of a plain tail)."""
    lines = log.splitlines()
    first = next(i for i, line in enumerate(lines) if " ERROR " in line or "Traceback" in line)
    return "\n".join(lines[max(0, first - 10) : first + 40])


def stats_lines(board):
    """The broker's stats lines written so far (whole lines: not one being written)."""
    return [line for line in board.log().split("\n")[:-1] if "heap live" in line]


def heap_figures(board):
    """(live, peak) from the newest stats line, after the next one is written."""
    seen = len(stats_lines(board))
    line = wait_until(lambda: stats_lines(board)[seen:], 15, what="the broker's next stats line")[-1]
    return int(re.search(r"heap live (\d+)", line).group(1)), int(re.search(r"peak (\d+)", line).group(1))
