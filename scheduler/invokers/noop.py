"""The ``noop`` kind: for tests, demos and measuring cronchain itself."""

from __future__ import annotations

from cronchain.scheduler.invokers.call import SUCCEEDED, Call, Outcome


class NoopInvoker:
    """Does nothing (after ``sleep`` seconds), or fails if ``fail`` is set: for tests,
    demos and measuring cronchain itself."""

    def instant(self, call: Call) -> bool:
        """Whether the call answers at once: its batch records it with the others, in
        the thread that took them (``scheduler.workers.work``)."""
        return not call.options["sleep"]

    def invoke(self, call: Call) -> Outcome:
        if call.options["sleep"] and call.lost.wait(call.options["sleep"]):
            return Outcome.failed("noop: stopped, the attempt is no longer current")
        return Outcome.failed("noop: fail is set") if call.options["fail"] else SUCCEEDED
