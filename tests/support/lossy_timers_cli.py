"""``rotator`` whose scheduler loses timer fires: a test hook, never part of the product.

Run as ``python -m tests.support.lossy_timers_cli run ...`` (the CLI's arguments) with
``ROTATOR_TEST_LOSE_TIMERS`` set to a substring of the job ids to lose (job ids are
``<controller>:<namespace>/<name>``, so ``<namespace>/`` loses every fire for that namespace's
objects). Each such APScheduler job still runs at its time and does nothing, as a date job the
scheduler skipped and deleted; what brings the object back is the delaying queue's sweep.
"""

from __future__ import annotations

import os
import sys

from apscheduler.schedulers.base import BaseScheduler

from controllers import cli
from controllers.runtime import timers
from tests.support.timers import DroppingTimers

ENV = "ROTATOR_TEST_LOSE_TIMERS"


def main() -> int:
    pattern = os.environ.get(ENV, "")
    if not pattern:
        raise SystemExit(f"{ENV} must name the timer job ids to lose")
    real = timers.APSchedulerTimers

    def lossy(scheduler: BaseScheduler) -> DroppingTimers:
        return DroppingTimers(real(scheduler), drops=lambda job_id: pattern in job_id)

    timers.APSchedulerTimers = lossy  # type: ignore[assignment,misc]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
