"""The experiment loop: verify, plan, build, then for every cell gate -> start -> load -> stop -> gate.

Everything lands in the bundle as it happens: records are appended as requests finish, each
cell's state is written before and after it runs, and the bundle is summarised, reported and
signed whatever way the run ends (complete, failed or interrupted), so that it always verifies
and `kit run --resume BUNDLE` can finish it.

One module per job: ``inputs`` (manifest, signature, trust, resume sources), ``session`` (the bundle:
create or resume, lock, environment), ``images``, ``cells`` (one cell's lifecycle and its typed state),
``levels`` (one level's load and metrics), ``signals``, ``finish`` (summary, report, signing) and
``run`` (the pipeline).
"""

from kit.experiment.inputs import RunInputs, check_trust, load_for_run
from kit.experiment.options import Events, QuietEvents, RunOptions, RunResult
from kit.experiment.run import Experiment, run_experiment
from kit.experiment.signals import deferred_interrupts
from kit.server_spec import server_spec

__all__ = [
    "Events",
    "Experiment",
    "QuietEvents",
    "RunInputs",
    "RunOptions",
    "RunResult",
    "check_trust",
    "deferred_interrupts",
    "load_for_run",
    "run_experiment",
    "server_spec",
]
