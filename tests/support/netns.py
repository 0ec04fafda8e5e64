"""A network namespace of the test's own, joined to this machine by a veth pair, so that
a test can cut processes off from the servers and heal the split.

The servers listen on the pair's host end (``host``); processes on this machine reach
it as one of their own addresses, whatever the pair's state, and processes in the
namespace reach it across the pair. ``cut`` takes the host end down: the namespace's
packets are dropped without an answer (a black hole: an open connection's reads time
out, and resume with what was sent once the split heals), and a route that discards
the servers' answers keeps them on this machine. Nothing leaves the machine.

A namespace made with ``links=2`` has a second pair (``host_of(1)``, ``cut(1)``): a
server that listens on it (the broker, say) can be cut off alone, while the first
pair's servers (the database) stay in reach.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from dataclasses import dataclass

from tests.support.services import unavailable

SUBNETS = "10.203"  # the namespaces' /30s: 10.203.<n>.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _claim_subnet() -> int:
    """A /30 of SUBNETS that no other namespace has, claimed by adding its black-hole
    route, which the kernel refuses twice: tests in other processes that make
    namespaces at the same moment each get another."""
    for _ in range(64):
        used = subprocess.run(["ip", "route"], capture_output=True, text=True, timeout=30)
        free = [n for n in range(256) if f"{SUBNETS}.{n}.0/30" not in used.stdout]
        if not free:
            break
        index = random.choice(free)
        subnet = f"{SUBNETS}.{index}.0/30"
        added = subprocess.run(
            ["ip", "route", "add", "blackhole", subnet, "metric", "1000"],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "LC_ALL": "C"},  # the error below, in English
        )
        if added.returncode == 0:
            return index
        if "File exists" not in added.stderr:  # not taken meanwhile: a real failure
            raise RuntimeError(f"ip route add blackhole {subnet}: {added.stderr.strip()}")
    raise RuntimeError(f"no free /30 of {SUBNETS}.0.0/16 for a namespace")


@dataclass
class Namespace:
    name: str
    indexes: list[int]  # which /30 of SUBNETS each pair has

    @property
    def host(self) -> str:
        """The first pair's host end: where the servers listen."""
        return self.host_of(0)

    @property
    def subnet(self) -> str:
        return self._subnet(0)

    def subnet_of(self, link: int) -> str:
        """The pair's /30: its clients, for a server that listens on ``host_of(link)``."""
        return self._subnet(link)

    def host_of(self, link: int) -> str:
        return f"{SUBNETS}.{self.indexes[link]}.1"

    def _inside(self, link: int) -> str:
        return f"{SUBNETS}.{self.indexes[link]}.2"

    def _subnet(self, link: int) -> str:
        return f"{SUBNETS}.{self.indexes[link]}.0/30"

    def _veth(self, link: int) -> str:
        return f"{self.name}h{link}"

    @classmethod
    def create(cls, links: int = 1) -> Namespace:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            unavailable("network namespaces (root and iproute2's ip)")
        ns = cls(f"cc{uuid.uuid4().hex[:6]}", [])
        try:
            for _ in range(links):
                ns.indexes.append(_claim_subnet())
            _ip("netns", "add", ns.name)
            _ip("netns", "exec", ns.name, "ip", "link", "set", "lo", "up")
            for link in range(links):
                ns._join(link)
        except BaseException:
            ns.destroy()
            raise
        return ns

    def _join(self, link: int) -> None:
        inner = f"{self.name}n{link}"
        _ip("link", "add", self._veth(link), "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", self.name)
        _ip("addr", "add", f"{self.host_of(link)}/30", "dev", self._veth(link))
        _ip("link", "set", self._veth(link), "up")
        for args in (
            ("addr", "add", f"{self._inside(link)}/30", "dev", inner),
            ("link", "set", inner, "up"),
        ):
            _ip("netns", "exec", self.name, "ip", *args)

    def prefix(self) -> list[str]:
        """A command's prefix that runs it in the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self, link: int = 0) -> None:
        _ip("link", "set", self._veth(link), "down")

    def heal(self, link: int = 0) -> None:
        _ip("link", "set", self._veth(link), "up")

    def destroy(self) -> None:
        """The namespace, its pairs (a pair whose end never moved into the namespace
        too) and their routes; what is already gone is left alone."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
        for link in range(len(self.indexes)):
            for args in (
                ("link", "del", self._veth(link)),
                ("route", "del", "blackhole", self._subnet(link)),
            ):
                subprocess.run(["ip", *args], capture_output=True, timeout=30)
