"""Transports and platform glue that drive the sans-IO core: TCP on asyncio, the clock, logging."""
