"""A gateway as a member of a fleet ([fleet]): its documents read from the fleet's upstream,
checked, tried and applied as "commit confirmed", and its status sent up. CPython only: a
board's config comes with `hutch flash`. The document itself is hutch.fleet's (sans-IO).
"""
