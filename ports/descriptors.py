"""How many clients a CPython broker may hold at once by default: each holds a file descriptor,
and the process's limit on them (RLIMIT_NOFILE) is often 1024 until raised. At start (server/
host.py) and at each reload (server/reload.py, which compares the limits), `hutch serve` raises
its own soft limit to the hard one (as any process may), and takes what that allows, less a
reserve for its other files, as its `max_connections` when neither the config nor a board
profile sets one (Mosquitto and RabbitMQ have no cap of their own by default either: the
descriptors are theirs). CPython only: a board's profile sets its own, and a board's heap
holds none of this.
"""

import resource

RESERVED = 100  # the listeners, the journal's and the streams' files, bridges, the metrics port, the log
MOST = 1 << 20  # a soft limit this high at most, where the hard one is unlimited


def connection_budget():
    """The connections the descriptors allow, once the soft limit is raised as far as it may be."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MOST if hard == resource.RLIM_INFINITY else hard
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # (a container may refuse: the soft limit it has, then)
            pass
    return max(0, soft - RESERVED)


def fit_connections(limits):
    """limits (core/limits.py Limits) with max_connections what the descriptors allow, where
    neither the config nor a profile set it (Limits keeps what was given on the instance, the
    defaults on the class) and that is more than the default."""
    if "max_connections" not in vars(limits):
        limits.max_connections = max(limits.max_connections, connection_budget())
    return limits
