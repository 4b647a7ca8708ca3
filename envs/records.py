"""A safe serialisation for cached records: JSON with tagged numpy arrays, tuples and dataclasses — never pickle.

A trajectory-cache file may come from shared storage; reading it must not run code. ``pickle.loads`` would, so
records are encoded as compressed JSON: plain values as themselves, ``numpy`` arrays as dtype + shape + base64
bytes, tuples and non-string-keyed dicts tagged, and dataclasses by a registered name. Only the dataclasses in
:data:`RECORD_TYPES` (registered with :func:`serializable`) can be rebuilt — any other name is an error, not an
import. Floats round-trip exactly (``repr``), NaN and ±inf included.

Example:
    >>> import numpy as np
    >>> blob = encode({"ids": (1, 2), "h": np.arange(3, dtype=np.float16), "x": float("nan")})
    >>> out = decode(blob)
    >>> out["ids"], out["h"].dtype, out["h"].tolist(), out["x"] != out["x"]
    ((1, 2), dtype('float16'), [0.0, 1.0, 2.0], True)
    >>> decode(b"\\x80\\x04junk")
    Traceback (most recent call last):
    ...
    envs.records.RecordFormatError: not a Kairos record (pickled records are never read: delete the cache file)
"""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from typing import Any

import numpy as np

from envs.core.registry import Registry

#: the format marker every encoded record starts with
MAGIC = b"KRJ1"

#: dataclasses a record may contain, by name (``@serializable("Name")``)
RECORD_TYPES: Registry[type] = Registry("record type", dotted_paths=False)


class RecordFormatError(ValueError):
    """Bytes that are not an encoded record (e.g. a pickle from an older cache, or a corrupted value)."""


def serializable(name: str):
    """Class decorator: let dataclass ``cls`` be stored in (and rebuilt from) encoded records as ``name``."""

    def deco(cls: type) -> type:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"serializable('{name}'): {cls.__name__} is not a dataclass")
        RECORD_TYPES.register(name, cls)
        cls.__record_type__ = name  # type: ignore[attr-defined]
        return cls

    return deco


def _enc(x: Any) -> Any:
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        return {"__nd__": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}
    if isinstance(x, tuple):
        return {"__tuple__": [_enc(v) for v in x]}
    if isinstance(x, list):
        return [_enc(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in x):
            return {k: _enc(v) for k, v in x.items()}
        return {"__dict__": [[_enc(k), _enc(v)] for k, v in x.items()]}
    if isinstance(x, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(x)).decode()}
    name = getattr(type(x), "__record_type__", None)
    if name is not None and dataclasses.is_dataclass(x):
        return {"__dc__": name, "f": {f.name: _enc(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    raise TypeError(f"cannot store a {type(x).__name__} in a record (register its dataclass with "
                    "envs.records.serializable, or convert it to plain values)")


def _dec(x: Any) -> Any:
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "__nd__" in x:
        arr = np.frombuffer(base64.b64decode(x["b64"]), dtype=np.dtype(x["__nd__"]))
        return arr.reshape(x["shape"]).copy()
    if "__tuple__" in x:
        return tuple(_dec(v) for v in x["__tuple__"])
    if "__dict__" in x:
        return {_hashable(_dec(k)): _dec(v) for k, v in x["__dict__"]}
    if "__bytes__" in x:
        return base64.b64decode(x["__bytes__"])
    if "__dc__" in x:
        if x["__dc__"] not in RECORD_TYPES:
            raise RecordFormatError(f"record holds a '{x['__dc__']}', which is not a registered record type "
                                    f"({', '.join(RECORD_TYPES.names()) or 'none'})")
        cls = RECORD_TYPES.get(x["__dc__"])
        return cls(**{k: _dec(v) for k, v in x["f"].items()})
    return {k: _dec(v) for k, v in x.items()}


def _hashable(k: Any) -> Any:
    return tuple(_hashable(v) for v in k) if isinstance(k, list) else k


def encode(value: Any) -> bytes:
    """``value`` as bytes: :data:`MAGIC` + zlib-compressed JSON."""
    text = json.dumps(_enc(value), separators=(",", ":"), allow_nan=True)
    return MAGIC + zlib.compress(text.encode(), 1)


def decode(blob: bytes) -> Any:
    """Inverse of :func:`encode`; anything else is a :class:`RecordFormatError` (nothing is executed)."""
    blob = bytes(blob)
    if not blob.startswith(MAGIC):
        raise RecordFormatError("not a Kairos record (pickled records are never read: delete the cache file)")
    try:
        return _dec(json.loads(zlib.decompress(blob[len(MAGIC):])))
    except (zlib.error, ValueError, KeyError, TypeError) as e:
        if isinstance(e, RecordFormatError):
            raise
        raise RecordFormatError(f"corrupted record ({type(e).__name__}: {e})") from e
