"""What goes onto a MicroPython board, and the build of that bundle."""
