"""``port.plain_repr``: the ``argsrepr`` header cronchain writes for tick messages is
the one Celery's ``saferepr`` would have written, or None (Celery writes it)."""

from __future__ import annotations

import random

from celery.utils.saferepr import saferepr

from cronchain.scheduler.workers.port import plain_repr
from cronchain.scheduler.workers.runtime import sending_app


def tick_args(rng: random.Random) -> tuple:
    def pair() -> tuple[int, int]:
        return rng.randrange(1, 10 ** rng.randrange(1, 10)), rng.getrandbits(62) + 1

    if rng.random() < 0.3:
        return pair()  # tick_later's
    return ([pair() for _ in range(rng.randrange(1, 60))],)  # tick_batch's


def test_it_is_saferepr_or_none_over_random_tick_args():
    rng = random.Random(18)
    plain = 0
    for _ in range(5000):
        args = tick_args(rng)
        limit = rng.choice([1024, 600, 64])
        levels = rng.choice([0, 1, 2, 3, 4])
        found = plain_repr(args, limit, levels)
        if found is not None:
            plain += 1
            assert found == saferepr(args, limit, maxlevels=levels), (args, limit, levels)
    assert plain > 1500


def test_a_batch_of_twenty_is_plain_under_celerys_own_settings():
    app = sending_app()
    limit, levels = app.amqp.argsrepr_maxsize, app.conf.task_repr_maxlevels
    rng = random.Random(2)
    args = ([(rng.randrange(10**6), rng.getrandbits(62) + 1) for _ in range(20)],)
    assert plain_repr(args, limit, levels) == saferepr(args, limit, maxlevels=levels)
    assert plain_repr((5, 2**62), limit, levels) == "(5, 4611686018427387904)"
    long = ([(10**8, 2**62)] * 40,)
    assert plain_repr(long, limit, levels) is None  # cut by saferepr: Celery's to write
