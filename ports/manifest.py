# What of hutch.ports goes onto a board (MicroPython's manifest syntax; see core/manifest.py).
# Left out: tcp_cpython.py, the TCP port on CPython's asyncio protocols (a board's asyncio has
# only streams: tcp.py), and epoll_sockets.py, its sockets on Linux; verify.py, the CRC check of sealed segments once the broker serves (a
# board checks them before); status_file.py, the status for `hutch ctl status` (no one reads it on a
# board); folder_lock.py, one broker per data folder (flock: one process owns a board's
# filesystem, and MicroPython has no fcntl); tls_cpython.py, TLS on tcp_cpython.py's sockets;
# certname.py, the user a client certificate names (a board's TLS socket shows no certificate);
# control_socket.py and control_request.py, `hutch ctl`'s way into a running broker (a Unix socket:
# no hutch ctl on a board);
# descriptors.py, the default max_connections from the file-descriptor limit (a board's profile sets its own).
package(
    "hutch/ports",
    files=(
        "__init__.py",
        "clock.py",
        "disk_free.py",
        "files.py",
        "heap.py",
        "http.py",
        "interrupt.py",
        "log.py",
        "metrics.py",
        "recovery.py",
        "repair.py",
        "segments.py",
        "serial.py",
        "status_page.py",
        "storage.py",
        "streams.py",
        "tcp.py",
        "tls.py",
        "uart.py",
    ),
)
