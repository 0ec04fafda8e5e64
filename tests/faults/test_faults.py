"""Each fault on its own, then several mixed at random, against a running deployment.

After each, the ledger over the whole window: every expected slot in history exactly
once, as SUCCEEDED or SKIPPED with a reason; nothing lost, nothing twice, nothing left
unfinished; every process still alive; every job firing again within a few watchdog
intervals.
"""

from __future__ import annotations

import random

import pytest

from tests.faults.rig import (
    FAULTS,
    Ledger,
    Rig,
    account,
    fault_seed,
    recovery_bound,
    run_fault,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.redis, pytest.mark.faults]
MIXED = 4


def check(rig: Rig, ledger: Ledger, faults: list[str], label: str) -> None:
    detail = account(rig, ledger, label)
    assert ledger.whole, detail
    assert ledger.unfinished == 0, detail
    assert ledger.recover <= recovery_bound(faults), detail


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault(rig: Rig, fault: str) -> None:
    seed = fault_seed()
    print(f"{fault}: seed {seed}")
    check(rig, run_fault(rig, [FAULTS[fault]], random.Random(seed)), [fault], fault)


def test_mixed_faults(rig: Rig) -> None:
    seed = fault_seed()
    rng = random.Random(seed)
    faults = rng.choices(sorted(FAULTS), k=MIXED)
    print(f"mixed faults {faults}: replay with CRONCHAIN_FAULT_SEED={seed}")
    ledger = run_fault(rig, [FAULTS[name] for name in faults], rng)
    check(rig, ledger, faults, f"mixed (seed {seed})")
