"""Durability: the journal's records, what goes into it, how it is replayed at start, how old
segments are compacted, and a durable queue's backlog on disk (paging)."""
