"""Features that hold runs and hear their ends: requires, gates, pools, backfill and
triggers, plugged into the core (``core.host``) by ``scheduler.engine``."""
