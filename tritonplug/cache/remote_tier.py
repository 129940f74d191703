"""The remote tier behind the local disk cache: memory → disk → **remote** → compile (the store it uses is
chosen by :mod:`tritonplug.cache.remote`).

Values are the disk cache's own entries (:mod:`tritonplug.cache.entries`: checksummed, signed when a fleet key is
set, never pickled), stored under ``tritonplug-<version>/triton-<version>/<key>``; a value that does not decode
for its key (corrupt, truncated, foreign) is ignored with one warning, and replaced when this process
compiles the key; with a fleet key set, a value refused (unsigned, signed by an unknown key, a bad signature) is
named once per key and likewise replaced. A remote hit is also written, as the very bytes fetched (signature
included, checked again), to the local disk cache, by a background thread that the interpreter waits for at exit
(the disk cache publishes atomically, so a reader never sees half an entry). A disk hit is offered to the store
(:meth:`RemoteTier.offer`), by another background thread, which puts it there if the store holds no valid entry
for its key: so a process that restarts with a warm disk still serves its peers.

Single flight across hosts: a host claims the keys still missing (an expiring claim, renewed while it
compiles), in key order, stopping at the first key another host holds; it compiles what it claimed, publishes
and releases it. So the hosts of a fleet that start together leave a batch (the configurations of one
autotuned call) to one host, whose worker pool compiles it in parallel, instead of each starting a pool for a
share of it. The hosts that lost a claim wait for the entries, take a claim over if it expires or is released
unpublished (its holder died or failed), and compile themselves after ``TRITONPLUG_REMOTE_WAIT_S``.

A store error never fails a lowering: it is warned once, the key is compiled locally, and after a few
failures in a row (or one permanent failure, such as a wrong password) the tier is off for the process.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from tritonplug import settings
from tritonplug.cache.entries import EntryRefused, decode_entry, encode_entry
from tritonplug.cache.refusals import Refusals
from tritonplug.cache_records import RemoteCacheError, RemoteStore
from tritonplug.calls import user_warnings
from tritonplug.records import Binary

log = logging.getLogger("tritonplug.remote")

WAIT_ENV = settings.REMOTE_WAIT_S.name  # named in the give-up warning
MAX_FAILURES = 3  # failures in a row that switch the tier off for the process
_POLL_FIRST_S, _POLL_MAX_S = 0.01, 0.1  # waiting for an entry: the first poll, and the slowest
_CLAIM_CHECK_S = 1.0  # waiting: how often to look for claims that expired (or were released unpublished)



class _Request(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def description(self) -> str: ...


Compile = Callable[[list[Any]], dict[str, Binary]]


class RemoteTier:
    """One opened store and the single-flight protocol over it; every store call is guarded."""

    def __init__(self, store: RemoteStore, namespace: str, claim_s: float, wait_s: float,
                 stats: dict[str, int]) -> None:
        self.store = store
        self.stats = stats  # remote_hits, remote_waits, remote_published, remote_errors: updated under the lock
        self.description = store.describe()
        self.namespace = namespace
        self.claim_s = claim_s
        self.wait_s = wait_s
        self.off = False
        self._disk_writer = ThreadPoolExecutor(1, thread_name_prefix="tritonplug-remote-hits")
        self._offers = ThreadPoolExecutor(1, thread_name_prefix="tritonplug-remote-offers")
        self._offered: set[str] = set()  # keys offered (once each per process)
        self.refusals = Refusals()
        self._failures = 0
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return self.description.location

    @property
    def writable(self) -> bool:
        return self.description.writable and not self.off

    def resolve(self, requests: Sequence[_Request], compile_here: Compile, disk: Any) -> dict[str, Binary]:
        """Binaries for ``requests`` (all missing from memory and disk): fetched, waited for, or compiled by
        ``compile_here`` (which also writes the local disk); remote hits go to ``disk`` (may be ``None``)."""
        found, pending = self._fetch_each(requests, disk, warn_corrupt=True)
        if not pending:
            return found
        if not self.writable:
            found.update(compile_here(pending))
            return found
        mine = []
        for r in sorted(pending, key=lambda r: r.key):  # the same order on every host
            if not self._call("claim", self.store.claim, self._name(r.key), self.claim_s, failed=True):
                break  # another host has this batch: wait for all of it rather than start a second compile pool
            mine.append(r)
        theirs = [r for r in pending if r not in mine]
        if mine:
            found.update(self._compile_claimed(mine, compile_here, disk))
        if theirs:
            found.update(self._wait(theirs, compile_here, disk))
        return found

    def _compile_claimed(self, requests: list[Any], compile_here: Compile, disk: Any) -> dict[str, Binary]:
        """Compile keys this process claimed, renewing the claims meanwhile; publish, then release them. A claim can
        be won just after its holder published and released the key (between this process's miss and its claim):
        each key is looked up once more first, and fetched rather than compiled a second time."""
        try:
            found, missing = self._fetch_each(requests, disk, warn_corrupt=False)
            if missing:
                with self._renewing([r.key for r in missing]):
                    compiled = compile_here(missing)
                for r in missing:
                    self._publish(r.key, compiled[r.key])
                found.update(compiled)
        finally:
            for r in requests:
                self._call("release", self.store.release, self._name(r.key), failed=None)
        return found

    def _wait(self, requests: list[Any], compile_here: Compile, disk: Any) -> dict[str, Binary]:
        """Wait for other hosts' entries; take over expired claims; compile the rest after ``wait_s``."""
        found: dict[str, Binary] = {}
        pending = list(requests)
        deadline = time.monotonic() + self.wait_s
        poll = _POLL_FIRST_S
        next_claim_check = time.monotonic() + _CLAIM_CHECK_S
        with self._lock:
            self.stats["remote_waits"] += len(pending)
        log.info("waiting up to %.0f s for %d kernel(s) another host is compiling", self.wait_s, len(pending))
        while pending and not self.off and time.monotonic() < deadline:
            time.sleep(poll)
            poll = min(poll * 1.5, _POLL_MAX_S)
            check_claims = time.monotonic() >= next_claim_check
            if check_claims:
                next_claim_check = time.monotonic() + _CLAIM_CHECK_S
            taken = []
            for r in list(pending):
                binary = self._fetch(r.key, disk, warn_corrupt=False)
                if binary is not None:
                    log.info("remote cache hit after waiting for %s (key %s)", r.description, r.key[:12])
                    found[r.key] = binary
                    pending.remove(r)
                elif not check_claims:
                    break  # entries are published in order: poll the first missing one until it lands
                elif self._call("claim", self.store.claim, self._name(r.key), self.claim_s, failed=True):
                    taken.append(r)  # the claim expired or was released unpublished: compile it here
                    pending.remove(r)
            if taken:
                self._warn_once("takeover", f"a claim on {len(taken)} kernel(s) in the remote kernel cache "
                                f"{self.location} expired or was released before its holder published them (a host "
                                f"that died?); compiling them here")
                found.update(self._compile_claimed(taken, compile_here, disk))
        if pending:
            if not self.off:
                self._warn_once("timeout", f"gave up waiting {self.wait_s:.0f} s ({WAIT_ENV}) for {len(pending)} "
                                f"kernel(s) another host claimed in the remote kernel cache {self.location}; "
                                f"compiling them here")
            compiled = compile_here(pending)
            for r in pending:
                self._publish(r.key, compiled[r.key])
            found.update(compiled)
        return found

    def _fetch_each(self, requests: Sequence[_Request], disk: Any,
                    warn_corrupt: bool) -> tuple[dict[str, Binary], list[Any]]:
        """The entries the store holds for ``requests``, by key, and the requests it holds none for."""
        found, missing = {}, []
        for r in requests:
            binary = self._fetch(r.key, disk, warn_corrupt)
            if binary is None:
                missing.append(r)
            else:
                log.info("remote cache hit for %s (key %s)", r.description, r.key[:12])
                found[r.key] = binary
        return found, missing

    def _fetch(self, key: str, disk: Any, warn_corrupt: bool) -> Binary | None:
        data = self._call("get", self.store.get, self._name(key), failed=None)
        if data is None:
            return None
        binary = self._decode(key, bytes(data), warn_corrupt)
        if binary is None:
            return None
        with self._lock:
            self.stats["remote_hits"] += 1
        if disk is not None:  # write-behind: the lowering need not wait for the fsync (done before exit)
            self._disk_writer.submit(disk.put_entry, key, bytes(data))
        return binary

    def _decode(self, key: str, data: bytes, warn_corrupt: bool) -> Binary | None:
        """The entry ``data`` holds for ``key``; ``None`` (warned) if it is damaged, foreign or refused."""
        try:
            return decode_entry(key, data)
        except settings.SettingError:
            raise
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            if isinstance(exc, EntryRefused):
                self.refusals.entry(key, f"{self._name(key)} in the remote kernel cache {self.location}", exc,
                                    "the kernel is compiled here (and published over it where this process may write)")
            elif warn_corrupt:
                self._warn_once("corrupt", f"ignoring a damaged or foreign entry under {self._name(key)} in the remote "
                                f"kernel cache {self.location} ({exc}); it is replaced once compiled")
            return None

    def offer(self, key: str, blob: bytes) -> None:
        """A disk hit's entry (its bytes as stored): put it in the store, in the background, if the store holds no
        valid entry for ``key``. At most once per key per process; never raises, never waits."""
        with self._lock:
            if not self.writable or key in self._offered:
                return
            self._offered.add(key)
        self._offers.submit(self._offer_now, key, blob)

    def _offer_now(self, key: str, blob: bytes) -> None:
        data = self._call("get", self.store.get, self._name(key), failed=b"")
        if data is not None and (data == b"" or self._decode(key, bytes(data), warn_corrupt=False) is not None):
            return  # the store has it (or failed to answer: warned)
        self._put_blob(key, blob)

    def _publish(self, key: str, binary: Binary) -> None:
        if not self.writable:
            return
        try:
            blob = encode_entry(key, binary)
        except TypeError as exc:
            log.info("not publishing %s: %s", key[:12], exc)
            return
        self._put_blob(key, blob)

    def _put_blob(self, key: str, blob: bytes) -> None:
        limit = self.description.max_entry_bytes
        if not self.writable:
            return
        if limit and len(blob) > limit:
            log.info("not publishing %s: %d bytes exceed the remote limit of %d", key[:12], len(blob), limit)
            return
        if self._call("put", self.store.put, self._name(key), blob, failed=False):
            with self._lock:
                self.stats["remote_published"] += 1
            log.info("published %s to %s (%d bytes)", key[:12], self.location, len(blob))

    @contextlib.contextmanager
    def _renewing(self, keys: list[str]) -> Iterator[None]:
        """Renew the claims on ``keys`` every third of their lifetime until the block ends."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.claim_s / 3):
                for key in keys:
                    self._call("claim", self.store.claim, self._name(key), self.claim_s, failed=True)

        thread = threading.Thread(target=renew, name="tritonplug-claim-renewal", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _name(self, key: str) -> str:
        return f"{self.namespace}/{key}"

    def _call(self, what: str, method: Callable[..., Any], *args: Any, failed: Any) -> Any:
        """``method(*args)``, or ``failed`` when the tier is off or the store raises (warned once)."""
        if self.off:
            return failed
        try:
            result = method(*args)
        except Exception as exc:
            permanent = isinstance(exc, RemoteCacheError) and exc.permanent
            with self._lock:
                self.stats["remote_errors"] += 1
                self._failures += 1
                switch_off = permanent or self._failures >= MAX_FAILURES
                self.off = self.off or switch_off
            detail = f"{type(exc).__name__}: {exc}" if not isinstance(exc, RemoteCacheError) else str(exc)
            self._warn_once("failure", f"the remote kernel cache {self.location} failed ({what}: {detail}); "
                            f"kernels are compiled locally meanwhile, and the remote tier switches itself off for "
                            f"this process after {MAX_FAILURES} failures in a row or a permanent one")
            if switch_off:
                log.warning("remote kernel cache %s switched off for this process", self.location)
            return failed
        with self._lock:
            self._failures = 0
        return result

    def _warn_once(self, kind: str, message: str) -> None:
        log.info("%s", message)
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        user_warnings.warn(f"tritonplug: {message}", RuntimeWarning)

    def status(self) -> dict[str, Any]:
        """For ``tritonplug info``: where the store is, its mode, and whether it answers a ping now."""
        try:
            self.store.ping()
            reachable: Any = True
        except Exception as exc:
            reachable = f"no ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        d = self.description
        return {"store": d.location, "plugin": d.plugin, "mode": "readwrite" if d.writable else "read",
                "reachable": reachable, "switched off": self.off, "claim (s)": self.claim_s, "wait (s)": self.wait_s,
                **({"max entry bytes": d.max_entry_bytes} if d.max_entry_bytes else {}),
                **({"entry ttl (s)": d.entry_ttl_s} if d.entry_ttl_s else {}), **({"detail": d.detail} if d.detail
                                                                                   else {})}
