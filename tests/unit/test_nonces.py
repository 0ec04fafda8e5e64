"""Tick nonces: drawn from a generator of cronchain's own, which neither a project's
``random.seed`` nor a fork makes repeat in another worker."""

from __future__ import annotations

import os
import random

from cronchain.scheduler.core.stepping import random_nonce


def test_a_project_seeding_random_does_not_repeat_nonces():
    state = random.getstate()
    try:
        random.seed(7)
        first = [random_nonce() for _ in range(3)]
        random.seed(7)
        assert [random_nonce() for _ in range(3)] != first
    finally:
        random.setstate(state)


def test_forked_workers_draw_different_nonces():
    """Celery's prefork pool forks its children after cronchain is imported: without a
    new seed, every child would draw the parent's sequence."""
    children = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its first nonces, to the parent
            os.close(read)
            os.write(write, repr([random_nonce() for _ in range(3)]).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            children.append(pipe.read())
        os.waitpid(pid, 0)
    parent = repr([random_nonce() for _ in range(3)])
    assert len({parent, *children}) == 3


def test_nonces_are_positive_and_fit_a_bigint():
    assert all(0 < random_nonce() < 2**63 for _ in range(1000))
