"""The broker's side of bridges: the outbox that forwards a local queue upstream, the inbox that
publishes what comes down, and the duplicate check that makes hutch -> hutch exactly once."""
