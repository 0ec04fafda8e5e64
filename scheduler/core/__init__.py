"""The core: the engine that hosts the job machine, a run's life, tick batches and the
group commit of outcomes. It names no feature; features plug in (``scheduler.core.host``)."""
