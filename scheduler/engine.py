"""cronchain's engine: the core (``scheduler.core.engine``) with cronchain's features
plugged in, in their order. The one place that names them all: adding a hold, a
listener or a sweeper is its own file and a line here."""

from __future__ import annotations

from typing import Any

from cronchain.scheduler.alerts.delivery import AlertsDue
from cronchain.scheduler.alerts.raising import Raised
from cronchain.scheduler.core.engine import Core
from cronchain.scheduler.core.host import Plugins
from cronchain.scheduler.workflows import backfill, gates, pools, triggers, upstream, upstream_waits

ALERTS = Raised()

PLUGINS = Plugins(
    # A run passes its upstreams, then its gates (asked only once its upstreams allow
    # it), then takes a place in its pool: it holds no place while it waits for others.
    holds=(upstream.UpstreamHold(), gates.GateHold(), pools.PoolHold()),
    # Releases and promotions are read before the machine hears the end, triggers
    # after it (``Runs.finished``).
    run_ends=(
        ALERTS,
        pools.PlaceFreed(),
        upstream.RequirementsMet(),
        backfill.NextSlot(),
        triggers.TriggersOnSuccess(),
    ),
    claims=(ALERTS,),
    # The watchdog's duties beside its own repairs, in the order of its pass.
    sweepers=(
        gates.OverdueChecks(),
        AlertsDue(),
        pools.WaitersFilled(),
        upstream_waits.WaitingLookedAt(),
    ),
    in_process={
        upstream.Recheck: upstream_waits.look_again_soon,
        pools.Fill: pools.fill_pools,
    },
)


class Engine(Core):
    """The core with cronchain's plug-ins (``PLUGINS``). Build one per process."""

    def __init__(self, *args: Any, **options: Any):
        options.setdefault("plugins", PLUGINS)
        super().__init__(*args, **options)
