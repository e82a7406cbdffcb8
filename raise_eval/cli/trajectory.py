"""`raise-eval trajectory DIR`: log Z and the test log-likelihood sandwich at every checkpoint of one training run,
from one pass along the run's trajectory. The options are the declarations of `TrajectoryInputSettings` (whose data
options are `InputSettings`'), `TrajectorySettings` and `OutputSettings`."""

from __future__ import annotations

import argparse
import sys

from raise_eval.cli.common import check_environment, configure_threads, write_report
from raise_eval.cli.options import add_subcommand, flags, settings_from
from raise_eval.io.run_files import OutputSettings
from raise_eval.io.trajectory_files import TrajectoryInputSettings, load_trajectory_inputs
from raise_eval.trajectory.report import TrajectoryInterrupted
from raise_eval.trajectory.run import evaluate_trajectory
from raise_eval.trajectory.settings import TrajectorySettings

DESCRIPTION = """\
Log Z and the average test log-likelihood at every checkpoint of one training run, from one annealing pass along
the training trajectory itself:

  path   an independent start (the data base rates, or uniform), then the checkpoints in training order, with
         the parameters interpolated linearly between neighbours (K sub-steps per link). Training crosses the
         model's phase transitions slowly, so this path is usually easier to anneal than the temperature path.
  AIS    one pass of M chains gives log Z at every checkpoint (a stochastic lower bound each), hence an
         optimistic log-likelihood at every checkpoint.
  BAR    the Bennett acceptance ratio between neighbouring checkpoints, from the same chains: an independent
         estimate of every log Z with bootstrap errors, and a health check that names the link where the
         checkpoints are too far apart (save them more often, or raise K).
  RAISE  reverse annealing along the trajectory from test vectors, at a few checkpoints (the last among them):
         a conservative log-likelihood, averaged over the test set with the control variate.
  exact  log Z and the log-likelihood by enumeration where at most --max-exact-units units must be enumerated.

The last checkpoint gets a verdict: closed when its sandwich is within --tolerance nats under the conditions of a
certified evaluation (exit status 0), else open with the reasons (exit status 3).

The folder: one run's checkpoints (.pt, .npz, .mat) of one model (same class and layer sizes), ordered by a
manifest trajectory.json (the training scripts write one with --save-trajectory) or by the step number in the file
names (step_0000500.pt). The test data default to the dataset the last checkpoint's metadata names.
"""

EPILOG = """\
examples:
  python scripts/train_rbm_paper.py mnistCD1-20 --epochs 5 --out-dir runs --save-trajectory runs/rbm20 --trajectory-every 100
  raise-eval trajectory runs/rbm20 --steps 100 --plot rbm20.png
  raise-eval trajectory runs/rbm20 --data binarized_mnist --ais-chains 500 --raise-checkpoints 10 --json out.json
"""

EXIT_OPEN = 3
SETTINGS = (TrajectoryInputSettings, TrajectorySettings, (OutputSettings, ("resume_file",)))
FLAGS = flags(TrajectoryInputSettings, TrajectorySettings, OutputSettings)


def add_parser(sub) -> None:
    add_subcommand(
        sub,
        "trajectory",
        help="log Z and the AIS/RAISE sandwich at every checkpoint of one training run (a folder of checkpoints)",
        description=DESCRIPTION,
        epilog=EPILOG,
        options=SETTINGS,
        run=run,
    )


def run(args: argparse.Namespace) -> int:
    check_environment()
    inputs = settings_from(args, TrajectoryInputSettings)
    settings = settings_from(args, TrajectorySettings)
    outputs = settings_from(args, OutputSettings)
    settings = settings.replace(threads=configure_threads(settings.threads))
    loaded = load_trajectory_inputs(inputs, settings.init)
    outputs.check_against(loaded.files)
    try:
        report = evaluate_trajectory(
            loaded.models,
            loaded.test,
            settings,
            training_steps=loaded.steps,
            names=loaded.names,
            train_pixel_means=loaded.train_pixel_means,
            labels=loaded.labels,
        )
    except TrajectoryInterrupted as stop:
        # Ctrl-C or SIGTERM part-way: no traceback; show and keep what finished, as evaluate and bdmc do.
        print("\n" + stop.report.format_table(FLAGS))
        write_report(stop.report, outputs.json, None, FLAGS, "marked incomplete: the stages that finished")
        print(f"raise-eval: interrupted during {stop.report.interrupted}", file=sys.stderr)
        return 130
    print(report.format_table(FLAGS))
    write_report(report, outputs.json, outputs.plot_path, FLAGS)
    return 0 if report.closed else EXIT_OPEN
