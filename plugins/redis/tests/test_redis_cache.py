"""The Redis tier end to end: real redis-server, real hosts (subprocesses with separate cache directories)
lowering an autotuned kernel for sm_90, counting compiles. Faults: none fails a lowering, each warns once."""

from __future__ import annotations

import os
import signal
import tempfile
import time

from hosts import remote_warnings, result, run_host, start_host
from redis_server import free_port

from tritonplug.cache.entries import decode_entry


def entry_keys(server) -> list[bytes]:
    return sorted(k for k in server.client().keys("tritonplug-*") if not k.endswith(b"#claim"))


def test_second_host_compiles_nothing_and_fills_its_disk(server) -> None:
    first = run_host(server.url(), 2, 101)
    assert first["stats"]["compiled"] == 2 and first["stats"]["remote_published"] == 2
    assert len(entry_keys(server)) == 2
    assert not server.client().keys("*#claim"), "claims are released after publishing"
    cache_dir = tempfile.mkdtemp(prefix="tritonplug-host-")
    second = run_host(server.url(), 2, 101, TRITONPLUG_CACHE_DIR=cache_dir)
    assert second["stats"]["compiled"] == 0 and second["stats"]["remote_hits"] == 2
    offline = run_host(None, 2, 101, TRITONPLUG_CACHE_DIR=cache_dir)  # the remote hits were written to disk
    assert offline["stats"]["compiled"] == 0 and offline["stats"]["disk_hits"] == 2
    assert not first["warnings"] and not second["warnings"]


def test_fleet_started_together_compiles_each_key_once(server) -> None:
    hosts = [start_host(server.url(), 4, 102) for _ in range(4)]
    reports = [result(h) for h in hosts]
    assert sum(r["stats"]["compiled"] for r in reports) == 4
    assert sum(r["stats"]["remote_published"] for r in reports) == 4
    for r in reports:
        assert r["stats"]["compiled"] + r["stats"]["remote_hits"] == 4 and not r["warnings"]
    assert sum(r["stats"]["remote_waits"] for r in reports) >= 4  # the others waited instead of compiling


def test_server_never_started() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    report = run_host(url, 2, 103)
    assert report["stats"]["compiled"] == 2
    (warning,) = remote_warnings(report)
    assert f"127.0.0.1:{url.split(':')[2]}" in warning and "ConnectionError" in warning
    assert report["stats"]["remote_errors"] == 3  # then the tier switched itself off: no further calls


def test_wrong_password_and_no_password(locked_server) -> None:
    for url, reason in [(locked_server.url(password="wrong"), "AuthenticationError"),
                        (locked_server.url(password=""), "AuthenticationError")]:
        report = run_host(url, 2, 104)
        assert report["stats"]["compiled"] == 2
        (warning,) = remote_warnings(report)
        assert reason in warning and "wrong" not in warning, warning  # named, and the password is not printed
        assert report["stats"]["remote_errors"] == 1  # permanent: off at once
    good = run_host(locked_server.url(), 2, 104)
    assert good["stats"]["remote_published"] == 2 and not good["warnings"]


def test_truncated_garbage_and_foreign_values_are_ignored_warned_once_and_replaced(server) -> None:
    run_host(server.url(), 3, 105)
    client = server.client()
    keys = entry_keys(server)
    values = [client.get(k) for k in keys]
    client.set(keys[0], values[0][: len(values[0]) // 2])  # truncated
    client.set(keys[1], os.urandom(300))  # garbage
    client.set(keys[2], values[0])  # a good entry, but for another key
    report = run_host(server.url(), 3, 105)
    assert report["stats"]["compiled"] == 3 and report["stats"]["remote_published"] == 3
    (warning,) = remote_warnings(report)
    assert "damaged or foreign" in warning
    for key in keys:  # each replaced by a good entry for its own key
        assert decode_entry(key.decode().rsplit("/", 1)[1], client.get(key)).kernel_name == "add_kernel"
    again = run_host(server.url(), 3, 105)
    assert again["stats"]["compiled"] == 0 and again["stats"]["remote_hits"] == 3 and not again["warnings"]


def test_claim_of_a_host_that_died_expires_and_another_host_compiles(server) -> None:
    doomed = start_host(server.url(), 2, 106, TRITONPLUG_REMOTE_CLAIM_S="12")  # outlives the next host's start-up
    client = server.client()
    deadline = time.monotonic() + 120
    while len(client.keys("*#claim")) < 2:
        assert doomed.poll() is None and time.monotonic() < deadline, "the first host never claimed its keys"
        time.sleep(0.01)
    os.killpg(doomed.pid, signal.SIGKILL)  # the host dies (with its compile workers) holding both claims
    doomed.communicate()
    assert not entry_keys(server)
    report = run_host(server.url(), 2, 106)
    assert report["stats"]["compiled"] == 2 and report["stats"]["remote_waits"] == 2
    assert report["stats"]["remote_published"] == 2
    (warning,) = remote_warnings(report)
    assert "expired or was released" in warning


def test_read_only_consumer_never_writes_nor_claims(server) -> None:
    reader = run_host(server.url(query="mode=read"), 2, 107)
    assert reader["stats"]["compiled"] == 2 and reader["stats"]["remote_published"] == 0
    assert server.client().keys("*") == [] and not reader["warnings"]
    run_host(server.url(), 2, 107)
    reader = run_host(server.url(query="mode=read"), 2, 107)
    assert reader["stats"]["compiled"] == 0 and reader["stats"]["remote_hits"] == 2


def test_server_killed_mid_run(server, tmp_path) -> None:
    pause = tmp_path / "paused"
    host = start_host(server.url(), 2, 108, args=["--twice-with-pause", str(pause)])
    deadline = time.monotonic() + 120
    while not pause.exists():
        assert host.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    assert len(entry_keys(server)) == 2
    server.stop()
    pause.unlink()
    report = result(host)
    assert report["stats"]["compiled"] == 4 and report["stats"]["remote_published"] == 2
    (warning,) = remote_warnings(report)
    assert "ConnectionError" in warning


def test_stalled_server_costs_a_bounded_delay(server) -> None:
    server.pause()  # accepts connections (the kernel does) but never answers: every call times out
    try:
        report = run_host(server.url(query="timeout_s=0.5"), 2, 109)
    finally:
        server.resume()
    assert report["stats"]["compiled"] == 2 and report["stats"]["remote_errors"] == 3
    (warning,) = remote_warnings(report)
    assert "Timeout" in warning
