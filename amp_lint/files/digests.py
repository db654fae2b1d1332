"""The hash functions of the cache keys and the dependency digests, without `import hashlib`.

`import hashlib` loads OpenSSL's bindings (`_hashlib`) first: about 7 ms, a twentieth of a warm run. CPython's
own modules give the same digests (`hashlib.blake2b` is `_blake2.blake2b` wherever that exists); hashlib is
the fallback where they are not built.
"""

from __future__ import annotations


def sha256(data: bytes = b""):
    """A `hashlib.sha256` object over `data`."""
    try:
        from _sha256 import sha256 as new  # CPython up to 3.11
    except ImportError:
        try:
            from _sha2 import sha256 as new  # CPython 3.12 on
        except ImportError:
            from hashlib import sha256 as new
    return new(data)


def blake2b(data: bytes, digest_size: int):
    """A `hashlib.blake2b` object over `data`."""
    try:
        from _blake2 import blake2b as new
    except ImportError:
        from hashlib import blake2b as new
    return new(data, digest_size=digest_size)
