"""The remote tier's single flight in one process, against a real redis-server: two hosts' tiers on one store."""

from __future__ import annotations

from dataclasses import dataclass

from tritonplug_redis.store import RedisStore, parse_url

from tritonplug.cache.remote_tier import RemoteTier
from tritonplug.records import Binary


@dataclass(frozen=True)
class Request:
    key: str
    description: str = "a kernel"


def binary(by: str) -> Binary:
    return Binary(kernel_name="k", format="cubin", images={"cubin": by.encode()}, metadata={"by": by})


def test_a_claim_won_just_after_its_holder_published_and_released_fetches_the_entry(server) -> None:
    """Host A misses the key; host B, which held its claim, publishes the entry and releases the claim; A's claim then
    succeeds. A must take B's entry, not compile the key a second time."""
    url = parse_url(server.url())
    key = Request("0" * 64)
    holder = RemoteTier(RedisStore(url), "ns", 30, 30, {"remote_hits": 0, "remote_waits": 0, "remote_published": 0})

    class PublishedBeforeTheClaim(RedisStore):
        """A real store, with B's whole compile run between A's lookup and A's claim."""

        def claim(self, name: str, ttl_s: float) -> bool:
            if not holder_ran:
                holder_ran.append(holder.resolve([key], lambda requests: {r.key: binary("B") for r in requests}, None))
            return super().claim(name, ttl_s)

    holder_ran: list = []
    compiled_by_a: list = []
    stats = {"remote_hits": 0, "remote_waits": 0, "remote_published": 0}
    tier = RemoteTier(PublishedBeforeTheClaim(url), "ns", 30, 30, stats)
    got = tier.resolve([key], lambda requests: compiled_by_a.append(requests) or {r.key: binary("A") for r in requests},
                       None)
    assert holder_ran and holder.stats["remote_published"] == 1  # B compiled and published while A was between steps
    assert compiled_by_a == [] and got[key.key].metadata == {"by": "B"}
    assert stats["remote_hits"] == 1 and stats["remote_published"] == 0
    assert RedisStore(url).claim(tier._name(key.key), 1)  # A released its claim: nobody holds the key any more
