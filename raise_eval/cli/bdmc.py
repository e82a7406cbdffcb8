"""`raise-eval bdmc`: the BDMC sandwich, ELBO, IWAE-k and AIDE for a VAE checkpoint or the user's own decoder. The
options are the declarations of `BDMCInputSettings`, `BDMCSettings` and `OutputSettings`."""

from __future__ import annotations

import argparse
import sys

from raise_eval.bidirectional.report import BDMCFailed, BDMCInterrupted
from raise_eval.bidirectional.run import check_bdmc_model, evaluate_bdmc
from raise_eval.bidirectional.settings import BDMCSettings
from raise_eval.cli.common import announce_null_outputs, check_environment, configure_threads, write_report
from raise_eval.cli.options import add_subcommand, die, flags, settings_from
from raise_eval.io.inputs import BDMCInputSettings, load_directed_model, load_real_data, load_simulated
from raise_eval.io.run_files import OutputSettings

DESCRIPTION = """\
Sandwich the log marginal likelihood of a directed model (a VAE) with bidirectional Monte Carlo.

Simulate examples from the model, keeping their latents as exact posterior samples; forward AIS from the prior
gives a stochastic lower bound on log p(x), reverse AIS from the exact sample a stochastic upper bound. Their gap
(BREAD: the per-chain gap) bounds the Jeffreys divergence between AIS's approximate posterior and the true one.
The ELBO and IWAE-k of the encoder are reported on the same examples for comparison; --real-data adds the same
estimators (and forward AIS) on real test vectors, and --aide measures the encoder against AIS.

HMC step sizes are tuned in a pilot run and then frozen, so the bounds keep their guarantees.

The model: a raise-eval VAE checkpoint, or --model FILE.py:FACTORY, a function in your own file that returns your
decoder (and encoder) wrapped in raise_eval.DecoderModel, with a likelihood by name: bernoulli, gaussian,
discretized_logistic (8-bit pixels) or discretized_logistic_mixture. --real-data must then lie in the likelihood's
support (e.g. integers 0..255 for the discretized logistic).
"""

EPILOG = """\
examples:
  raise-eval bdmc checkpoints/vae_mnist_z10.pt --steps 100 1000 --plot bounds.png
  raise-eval bdmc --model examples/plain_vae_factory.py:make_model --steps 100 1000
"""

SETTINGS = (BDMCInputSettings, BDMCSettings, (OutputSettings, ("resume_file",)))
FLAGS = flags(BDMCInputSettings, BDMCSettings, OutputSettings)


def add_parser(sub) -> None:
    add_subcommand(
        sub,
        "bdmc",
        help="BDMC sandwich, ELBO, IWAE-k and AIDE for a VAE checkpoint or your own decoder (--model)",
        description=DESCRIPTION,
        epilog=EPILOG,
        options=SETTINGS,
        run=run,
    )


def run(args: argparse.Namespace) -> int:
    check_environment()
    inputs = settings_from(args, BDMCInputSettings)
    settings = settings_from(args, BDMCSettings)
    outputs = settings_from(args, OutputSettings)
    announce_null_outputs(outputs, FLAGS)
    if "real_examples" in vars(args) and inputs.real_data is None:
        die("--real-examples belongs to --real-data: give --real-data NAME|FILE too")
    settings = settings.replace(threads=configure_threads(settings.threads))
    model = load_directed_model(inputs)
    if settings.aide:
        try:
            check_bdmc_model(model, aide=True)
        except ValueError:
            source = inputs.checkpoint or inputs.model
            die(f"--aide measures the encoder against AIS, but {source} holds a model without one; drop --aide")
    outputs.check_against(inputs.files())
    real = load_real_data(inputs, model)
    simulated = load_simulated(inputs)
    if real is not None and "real_examples" in vars(args) and settings.real_examples > len(real):
        die(f"--real-examples {settings.real_examples}: --real-data {inputs.real_data} has only {len(real)} vectors")
    labels = {"checkpoint": inputs.checkpoint, "model_factory": inputs.model, "real_data": inputs.real_data,
              "simulated_file": inputs.simulated}  # fmt: skip
    if real is None:
        labels["real_examples"] = None
    plot_path = outputs.plot_path
    try:
        report = evaluate_bdmc(model, settings, real_data=real, simulated=simulated, labels=labels)
    except (BDMCInterrupted, BDMCFailed) as stop:
        # Ctrl-C or an error part-way: no traceback; show and keep what finished, as evaluate does.
        report = stop.report
        print(report.format_table(FLAGS))
        write_report(report, outputs.json, plot_path if report.sandwich else None, FLAGS,
                     "marked incomplete: the stages that finished")  # fmt: skip
        if isinstance(stop, BDMCInterrupted):
            print(f"raise-eval: interrupted during {report.interrupted}", file=sys.stderr)
            return 130
        print(f"raise-eval: error: {report.interrupted} failed: {report.error}", file=sys.stderr)
        return 1
    print(report.format_table(FLAGS))
    write_report(report, outputs.json, plot_path, FLAGS)
    if outputs.json and plot_path is None:
        print("note: no plot of the bounds against K (matplotlib is not installed; pip install -e .[plot])")
    return 0
