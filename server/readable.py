"""The certificate files a config names (a TLS listener's, a bridge's), checked at start: one that
cannot be read is said then, in one line, not at the first handshake. Loaded only by a broker
with TLS listeners or bridges (a board's idle heap has none of it)."""

from .runtime import StartError


def check_readable(where, files, keys):
    """StartError (exit 2) in one line naming the first of files' keys (a TLS listener's or a
    bridge's certificate files) whose file cannot be read: said at start, not at a handshake."""
    for key in keys:
        path = files[key]
        try:
            if path is not None:
                open(path, "rb").close()
        except OSError as e:
            raise StartError("%s: cannot read %s %s: %s" % (where, key, path, getattr(e, "strerror", None) or e), 2)
