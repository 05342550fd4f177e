# What of hutch.codec goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# all of it.
package(
    "hutch/codec",
    files=(
        "__init__.py",
        "errors.py",
        "link.py",
        "pem.py",
        "property_types.py",
        "readbuffer.py",
        "spec.py",
        "upstream.py",
        "upstream_client.py",
        "wire.py",
    ),
)
