"""hutch's tiny AMQP 0-9-1 client for sensor nodes (MicroPython first; TCP and serial)."""
