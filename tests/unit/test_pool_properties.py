"""The pure part of pools (statemachine.pool) under random arrivals, priorities and
finishes: a pool never holds more runs than its places, never leaves a place free while
a run waits, hands places out highest (aged) priority first, and starves no one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from cronchain.statemachine.pool import AGING, Waiter, choose, rank

T0 = datetime(2026, 3, 1, tzinfo=UTC)

# An event: (minutes later, arrival of this priority) or (minutes later, None: a finish).
events = st.lists(
    st.tuples(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 9))),
    max_size=200,
)


class Pool:
    def __init__(self, size: int):
        self.size = size
        self.running: list[Waiter] = []
        self.waiting: list[Waiter] = []
        self.started: list[tuple[datetime, Waiter]] = []

    def fill(self, now: datetime) -> None:
        chosen = choose(self.waiting, self.size - len(self.running), now)
        order = sorted(self.waiting, key=lambda w: rank(w, now))
        assert chosen == order[: len(chosen)]  # the best ranked, in rank order
        for waiter in chosen:
            self.waiting.remove(waiter)
            self.running.append(waiter)
            self.started.append((now, waiter))

    def check(self) -> None:
        assert len(self.running) <= self.size
        assert not self.waiting or len(self.running) == self.size  # no idle place


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 5), stream=events, data=st.data())
def test_a_pool_never_overfills_never_idles_and_starts_the_best_ranked(size, stream, data):
    pool, now, ids = Pool(size), T0, 0
    for minutes, priority in stream:
        now += timedelta(minutes=minutes)
        if priority is not None:
            ids += 1
            pool.waiting.append(Waiter(ids, priority, now, now))
        elif pool.running:
            pool.running.pop(data.draw(st.integers(0, len(pool.running) - 1)))
        pool.fill(now)
        pool.check()


@settings(max_examples=100, deadline=None)
@given(low=st.integers(0, 8), every=st.integers(1, 9), arrivals=st.integers(1, 3))
def test_aging_lets_a_low_priority_through_a_steady_stream_of_high_ones(low, every, arrivals):
    """One place; ``arrivals`` priority-9 runs come each ``every`` minutes and one run
    finishes as often: the low one still starts within (10 - low) aging steps of its
    arrival plus the time to drain the ones ranked above it then."""
    pool, now = Pool(1), T0
    pool.running.append(Waiter(0, 9, now, now))
    patient = Waiter(1, low, now, now)
    pool.waiting.append(patient)
    step, ids = timedelta(minutes=every), 1
    bound = (10 - low) * AGING + step * (arrivals * ((10 - low) * AGING // step + 1) + 2)
    while patient in pool.waiting:
        assert now - T0 <= bound, f"waited {now - T0}"
        now += step
        for _ in range(arrivals):
            ids += 1
            pool.waiting.append(Waiter(ids, 9, now, now))
        pool.running.pop(0)
        pool.fill(now)
        pool.check()


def test_equal_priorities_go_by_slot_then_id():
    a = Waiter(2, 5, T0, T0)
    b = Waiter(1, 5, T0, T0 + timedelta(seconds=1))
    c = Waiter(3, 5, T0, T0)
    assert choose([b, c, a], 2, T0) == [a, c]
    assert choose([a], 0, T0) == []
