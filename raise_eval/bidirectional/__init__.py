"""BDMC for directed models (VAEs and any user decoder): the forward/reverse AIS sandwich on simulated data, the
encoder's ELBO and IWAE, real data and AIDE.

settings.py (`BDMCSettings`), run.py (`evaluate_bdmc`, `check_bdmc_model`), report.py (`BDMCReport`: data). May
import the core (estimators, kernels, paths, schedules) and `runtime`; never the CLI or the renderers.
"""

from raise_eval.bidirectional.report import BDMCFailed, BDMCInterrupted, BDMCReport
from raise_eval.bidirectional.run import check_bdmc_model, evaluate_bdmc
from raise_eval.bidirectional.settings import BDMCSettings

__all__ = ["BDMCFailed", "BDMCInterrupted", "BDMCReport", "BDMCSettings", "check_bdmc_model", "evaluate_bdmc"]
