"""Built-in remote-cache plugin: the key-value store of JAX's coordination service (``jax.distributed``).

Every multi-process JAX job already runs this service (on process 0, reached over gRPC), so the processes
of one job can share compiled kernels and claims with no server to set up. It is registered through
:mod:`tritonplug.cache_hookspecs` like any plugin; the remote tier opens it on its own (URL ``jax://``) when
``jax.distributed`` is initialised and ``TRITONPLUG_REMOTE_CACHE`` names no other store.

The store has no expiring keys and no compare-and-set, only "insert unless present". A claim is therefore a
sequence of generations: ``<key>/claim/<n>`` holds ``"<owner> <deadline>"`` (wall-clock seconds); the first
process to insert generation ``n`` owns it until the deadline, renews it by overwriting its own value, and
releases it by writing a deadline of 0. When generation ``n`` has expired, the next claimant inserts
``n + 1``; generations are never deleted, and only the latest one counts, so a holder whose claim expired
learns that it lost it. (A renewal racing a takeover can leave two holders for a moment: both compile, and
the second publication overwrites the first with an equal entry.)
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tritonplug.cache_hookspecs import hookimpl
from tritonplug.cache_records import RemoteCacheError, RemoteCacheInfo, StoreDescription

NAMESPACE = "tritonplug/"
DEFAULT_MAX_ENTRY_BYTES = 16 << 20  # entries live in process 0's memory for the whole job
_MAX_GENERATIONS = 64  # claims of one key taken over this often mean something is badly wrong: stop claiming


@hookimpl
def tritonplug_cache_info() -> RemoteCacheInfo:
    return RemoteCacheInfo(name="jax", schemes=("jax",), version="builtin",
                           description="JAX's coordination service (jax.distributed), shared by one job's processes")


@hookimpl
def tritonplug_cache_open(url: str) -> CoordinationStore | None:
    parts = urlsplit(url if "://" in url else f"{url}://")
    if parts.scheme.lower() != "jax":
        return None
    if parts.netloc or parts.path.strip("/"):
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE={url!r}: the jax store takes no host or path (use jax://)")
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(options) - {"mode", "max_entry_bytes"})
    if unknown:
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE={url!r}: unknown option(s) {unknown} (known: mode, max_entry_bytes)")
    mode = options.get("mode", "readwrite")
    if mode not in ("read", "readwrite"):
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE={url!r}: mode must be 'read' or 'readwrite', got {mode!r}")
    try:
        max_entry = int(options.get("max_entry_bytes", DEFAULT_MAX_ENTRY_BYTES))
    except ValueError:
        max_entry = -1
    if max_entry < 0:
        raise ValueError(f"TRITONPLUG_REMOTE_CACHE={url!r}: max_entry_bytes must be a non-negative integer")
    from tritonplug.adapters import jax_compat  # imports JAX: only here, when a jax:// store is opened

    runtime = jax_compat.distributed_runtime()
    if runtime is None:
        raise ValueError("TRITONPLUG_REMOTE_CACHE=jax:// needs jax.distributed.initialize() to have run first")
    return CoordinationStore(runtime, writable=mode == "readwrite", max_entry_bytes=max_entry)


class CoordinationStore:
    """A :class:`~tritonplug.cache_records.RemoteStore` over the coordination service's key-value store."""

    def __init__(self, runtime: Any, writable: bool, max_entry_bytes: int) -> None:
        """``runtime``: a :class:`tritonplug.adapters.jax_compat.DistributedRuntime`."""
        self._runtime = runtime
        self._writable = writable
        self._max_entry_bytes = max_entry_bytes
        self._owner = f"{runtime.process_id}.{os.getpid()}.{secrets.token_hex(4)}"
        self._generation: dict[str, int] = {}  # per key: the lowest generation not known to be expired
        self._lock = threading.Lock()

    def _client(self) -> Any:
        from tritonplug.adapters import jax_compat

        runtime = jax_compat.distributed_runtime()
        if runtime is None:
            raise RemoteCacheError("jax.distributed has been shut down", permanent=True)
        return runtime.client

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self._client().key_value_try_get_bytes(NAMESPACE + key))
        except RemoteCacheError:
            raise
        except Exception as exc:
            if "NOT_FOUND" in str(exc):
                return None
            raise RemoteCacheError(_first_line(exc)) from exc

    def put(self, key: str, data: bytes) -> bool:
        if not self._writable or (self._max_entry_bytes and len(data) > self._max_entry_bytes):
            return False
        self._set(NAMESPACE + key, data, overwrite=True)
        return True

    def claim(self, key: str, ttl_s: float) -> bool:
        if not self._writable:
            return False
        with self._lock:
            generation = self._generation.get(key, 0)
        held = False
        while generation < _MAX_GENERATIONS:
            mine = f"{self._owner} {time.time() + ttl_s:.3f}".encode()
            if self._set(self._claim_name(key, generation), mine, overwrite=False):
                held = True
                break
            owner, deadline = self._read_claim(key, generation)
            if owner != self._owner and deadline > time.time():
                break  # another holder's live claim
            if self._read_claim(key, generation + 1)[0]:
                generation += 1  # a later generation exists: this one is over, whoever held it
                continue
            if owner == self._owner:  # still the latest, and ours: renew
                self._set(self._claim_name(key, generation), mine, overwrite=True)
                held = True
                break
            generation += 1  # expired or released: the next generation is up for grabs
        else:
            held = True  # takeovers without end: compile without a claim rather than wait forever
        with self._lock:
            self._generation[key] = generation
        return held

    def release(self, key: str) -> None:
        if not self._writable:
            return
        with self._lock:
            generation = self._generation.get(key)
        if generation is None or self._read_claim(key, generation + 1)[0]:
            return
        if self._read_claim(key, generation)[0] == self._owner:
            self._set(self._claim_name(key, generation), f"{self._owner} 0".encode(), overwrite=True)

    @staticmethod
    def _claim_name(key: str, generation: int) -> str:
        return f"{NAMESPACE}{key}/claim/{generation}"

    def _read_claim(self, key: str, generation: int) -> tuple[str, float]:
        """(owner, deadline) of one claim generation; ``("", 0.0)`` when it does not exist."""
        raw = self.get(self._claim_name(key, generation)[len(NAMESPACE):]) or b""
        owner, _, deadline = raw.decode(errors="replace").partition(" ")
        try:
            return owner, float(deadline)
        except ValueError:
            return owner, 0.0

    def _set(self, name: str, data: bytes, overwrite: bool) -> bool:
        """Insert (or overwrite) ``name``; ``False`` if it exists and ``overwrite`` is off."""
        try:
            self._client().key_value_set_bytes(name, data, allow_overwrite=overwrite)
            return True
        except RemoteCacheError:
            raise
        except Exception as exc:
            if not overwrite and "ALREADY_EXISTS" in str(exc):
                return False
            raise RemoteCacheError(_first_line(exc)) from exc

    def describe(self) -> StoreDescription:
        r = self._runtime
        return StoreDescription(plugin="jax", location=f"jax:// (coordination service at {r.coordinator_address}, "
                                f"process {r.process_id} of {r.num_processes})", writable=self._writable,
                                max_entry_bytes=self._max_entry_bytes)

    def ping(self) -> None:
        self.get("ping")

    def close(self) -> None:
        pass


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
