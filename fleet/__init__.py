"""hutch.fleet: what a gateway needs to take its configuration from a fleet, sans-IO.

- ed25519.py: Ed25519 signatures verified (RFC 8032), in plain Python where `cryptography`
  is not installed, and on boards;
- sha512.py: SHA-512 for a MicroPython firmware whose hashlib has none;
- document.py: a signed configuration document: its signature line, its [document] header
  and the sections it may set.

The gateway's side (fetching documents, applying them with a rollback, status up) is
server/fleet/; the fleet's side (`hutch fleet keygen | sign | push | status`) is tools/fleet.py.
"""
