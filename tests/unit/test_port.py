"""``port.args_repr``: the ``argsrepr`` header cronchain writes for tick and run batch
messages is the one Celery's ``saferepr`` would have written, or cut at the same limit,
or None (Celery writes it)."""

from __future__ import annotations

import random

from celery.utils.saferepr import saferepr

from cronchain.scheduler.workers.port import args_repr
from cronchain.scheduler.workers.runtime import sending_app


def tick_args(rng: random.Random) -> tuple:
    def pair() -> tuple[int, int]:
        return rng.randrange(1, 10 ** rng.randrange(1, 10)), rng.getrandbits(62) + 1

    def run() -> list[int]:
        return [rng.randrange(1, 10**9), rng.randrange(1, 5), rng.randrange(1, 10**6)]

    if rng.random() < 0.2:
        return pair()  # tick_later's
    if rng.random() < 0.5:
        return ([run() for _ in range(rng.randrange(1, 150))],)  # run_batch's
    return ([pair() for _ in range(rng.randrange(1, 150))],)  # tick_batch's


def test_it_is_saferepr_cut_or_none_over_random_batch_args():
    rng = random.Random(18)
    made = cut = 0
    for _ in range(5000):
        args = tick_args(rng)
        limit = rng.choice([1024, 600, 64, rng.randrange(20, 2000)])
        levels = rng.choice([0, 1, 2, 3, 4])
        found = args_repr(args, limit, levels)
        if found is None:
            continue
        made += 1
        if len(repr(args)) < limit:
            assert found == saferepr(args, limit, maxlevels=levels), (args, limit, levels)
        else:  # cut, as saferepr cuts, at the limit
            cut += 1
            assert len(found) <= limit and found.endswith("...")
            assert repr(args).startswith(found[:-3])
            if found.endswith(", ..."):  # after an item; else no whole item fits
                assert repr(args)[len(found) - 6 : len(found) - 3] in ("), ", "], ")
    assert made > 2500 and cut > 1000


def test_a_batch_of_twenty_is_plain_under_celerys_own_settings():
    app = sending_app()
    limit, levels = app.amqp.argsrepr_maxsize, app.conf.task_repr_maxlevels
    rng = random.Random(2)
    args = ([(rng.randrange(10**6), rng.getrandbits(62) + 1) for _ in range(20)],)
    assert args_repr(args, limit, levels) == saferepr(args, limit, maxlevels=levels)
    assert args_repr((5, 2**62), limit, levels) == "(5, 4611686018427387904)"
    long = ([(10**8, 2**62)] * 100,)
    cut = args_repr(long, limit, levels)
    assert cut is not None and cut.endswith("), ...") and len(cut) <= limit
    assert args_repr(long, limit, 1) is None  # a level left out: Celery's to write
