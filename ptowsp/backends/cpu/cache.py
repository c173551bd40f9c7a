"""The on-disk kernel cache: object code plus a manifest per build, checked before anything is used.

An entry is two files under `~/.cache/ptowsp/cpu` (or $PTOWSP_CACHE_DIR):
`<key>.o`, the object code, and `<key>.json`, its manifest: the key it was
stored under, the sha256 of the object code, the launch order and per
kernel its symbols, arguments, grid and access boxes (formulas as data,
never source text).  The manifest's last member, `manifest_sha256`, is the
sha256 of every byte before it, so the file is verified before it is
parsed; then it is validated by a pydantic model (unknown fields refused).
An entry that is truncated, corrupted, stored under another key or
invalid is discarded with a warning naming the file and recompiled; it is
never loaded.

What this guards against: disk corruption, torn or partial writes, files of
another build, and anything else that changes an entry by accident.  It does
not make a cache directory safe to take from someone else: whoever can write
to it can write a matching checksum, and object code is machine code that
runs in this process (docs/security.md).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import stat
import tempfile
import warnings
from typing import Annotated

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ptowsp.lower.access import KernelAccess
from ptowsp.lower.formula import Formula, check_limits

Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Symbol = Annotated[str, Field(pattern=r"^ptowsp_[A-Za-z0-9_]+(\.v[0-9]+)?$")]  # a variant: ptowsp_<task>.v<k>
_SEAL = b',"manifest_sha256":"'
_DIGEST = re.compile(rb"[0-9a-f]{64}")


class KernelCacheWarning(UserWarning):
    """A kernel cache entry was damaged or foreign: it was discarded and its kernels recompiled."""


class KernelEntry(BaseModel):
    """What running one kernel needs: its symbol, argument tensors in order, grid and access boxes."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    symbol: Symbol
    arguments: tuple[str, ...]  # inputs, then outputs
    grid: tuple[Annotated[Formula, AfterValidator(check_limits)], ...]  # extents, formulas over the sizes
    access: KernelAccess
    variants: tuple[Symbol, ...] = ()  # symbols of the specialized versions (Schedule.specialize), in order


class Manifest(BaseModel):
    """The manifest of one cache entry."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    key: Digest
    object_sha256: Digest
    order: tuple[str, ...]
    kernels: dict[str, KernelEntry]


def cache_dir() -> pathlib.Path:
    root = os.environ.get("PTOWSP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ptowsp")
    return pathlib.Path(root) / "cpu"


def entry_paths(key: str) -> tuple[pathlib.Path, pathlib.Path]:
    return cache_dir() / f"{key}.o", cache_dir() / f"{key}.json"


def discard(path: pathlib.Path, reason: str) -> None:
    """Warn that the entry at `path` is not used (it is overwritten by the recompiled one)."""
    warnings.warn(f"kernel cache entry {path} is discarded and recompiled: {reason}", KernelCacheWarning,
                  stacklevel=3)


def load(key: str) -> tuple[bytes, Manifest] | None:
    """The object code and manifest stored under `key`, verified; None when there is none or it fails
    a check (with a KernelCacheWarning)."""
    obj, manifest = entry_paths(key)
    if not (obj.exists() and manifest.exists()):
        return None
    for path in (obj, manifest):  # a FIFO would block the build for ever, a device never end
        try:
            regular = stat.S_ISREG(path.stat().st_mode)
        except OSError:
            regular = False
        if not regular:
            discard(path, "it is not a regular file (a FIFO, device or directory)")
            return None
    try:
        data, text = obj.read_bytes(), manifest.read_bytes()
    except OSError as e:
        discard(manifest, f"it cannot be read ({e.strerror})")
        return None
    found = _verified(key, data, text)
    if isinstance(found, str):
        discard(obj if found.startswith("the object code") else manifest, found)
        return None
    return data, found


def _verified(key: str, data: bytes, text: bytes) -> Manifest | str:
    """The manifest, or why the entry is refused: checksum first, then the model, the key, the object."""
    body, seal, digest = text.rpartition(_SEAL)
    if not seal or not digest.endswith(b'"}') or not _DIGEST.fullmatch(digest[:-2]):
        return "the manifest has no checksum at its end (truncated or not a manifest)"
    if hashlib.sha256(body).hexdigest().encode() != digest[:-2]:
        return "the manifest does not match its checksum"
    try:
        found = Manifest.model_validate_json(body + b"}")
    except pydantic.ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"]))
        return f"the manifest is not valid: {where + ': ' if where else ''}{first['msg']}"
    if found.key != key:
        return f"the manifest belongs to another build (key {found.key[:12]}...)"
    if hashlib.sha256(data).hexdigest() != found.object_sha256:
        return "the object code does not match the manifest's checksum"
    return found


def store(key: str, data: bytes, order: tuple[str, ...], kernels: dict[str, KernelEntry]) -> Manifest:
    """Store object code and its manifest under `key` (the manifest last: it marks the entry complete)."""
    manifest = Manifest(key=key, object_sha256=hashlib.sha256(data).hexdigest(), order=order, kernels=kernels)
    body = manifest.model_dump_json(exclude_defaults=True).encode()[:-1]  # without its closing brace
    obj, path = entry_paths(key)
    try:
        _write_atomically(obj, data)
        _write_atomically(path, body + _SEAL + hashlib.sha256(body).hexdigest().encode() + b'"}')
    except OSError as e:  # the cache only saves time: a build does not fail for it
        warnings.warn(f"kernel cache entry {path} cannot be stored ({e}); the next build compiles again",
                      KernelCacheWarning, stacklevel=3)
    return manifest


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Readers never see a torn file: write aside, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.NamedTemporaryFile(dir=path.parent, delete=False)
    try:
        with tmp:
            tmp.write(data)
    except OSError:  # (a full disk: the write or the close's flush): no torn file left behind
        os.unlink(tmp.name)
        raise
    try:
        os.replace(tmp.name, path)
    except OSError:
        os.unlink(tmp.name)
        raise
