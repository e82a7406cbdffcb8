"""What the evaluation plan decides for a model of the 'fully-visible' family (`FullyVisibleModel`: DCA Potts and
Ising models, no hidden units), so that it runs through the same plan and stages as a Boltzmann machine.

- its test vectors: site states in the model's convention (categorical: int64 codes 0..q-1; spin -1/+1 and
  bernoulli 0/1: floats in the model's dtype), checked before any work;
- its start: the independent-site base fitted to the training data's site frequencies (`train_pixel_means`, shaped
  (L, q): `raise_eval.visible_statistics(model, train_data)`), or uniform fields, with a note when init='base-rates'
  has no training data to fit;
- log f(v): the model's own log-density (closed form, as an RBM's), so no log f(v) estimator runs;
- the estimators' multiply-adds, for exact='auto' (a scan reads L q coupling entries per site update, 2 L updates
  per step, and the weight update a product of the (L q)-wide one-hot rows with the couplings).
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from raise_eval.paths.fully_visible import base_fields_from_frequencies, uniform_fields
from raise_eval.settings import SettingsError

FAMILY = "fully-visible"

UNIFORM_START_NOTE = (
    "the base is uniform fields: {init} base-rates fits the base to the training data's site frequencies, and none "
    "were given (pass {train_data} FILE, or train_pixel_means = raise_eval.visible_statistics(model, train_data))"
)


def fully_visible_test(model, test_data: Tensor) -> Tensor:
    """The test vectors as site states in the model's convention (categorical: int64 codes; spin / bernoulli: floats
    in the model's dtype) on its device, shaped (N, L); ValueError naming the test data when their shape or values
    do not fit the model's sites."""
    if test_data.dim() != 2 or test_data.shape[0] == 0:
        raise ValueError(
            f"test data must be shaped (N, {model.n_visible}) with N >= 1 (one state per site), got "
            f"{tuple(test_data.shape)}"
        )
    codes = model.codes(test_data.detach(), "test data")
    return model.sites_from_codes(codes)


def fully_visible_start(model, init: str, site_frequencies: Optional[Tensor]) -> tuple[list[Tensor], Optional[str]]:
    """(The base's fields as a one-element list, the note that says the base is uniform because init='base-rates'
    had no training data to fit, or None)."""
    if init != "base-rates":
        return [uniform_fields(model)], None
    if site_frequencies is None:
        return [uniform_fields(model)], UNIFORM_START_NOTE
    try:
        return [base_fields_from_frequencies(model, site_frequencies)], None
    except ValueError as e:
        raise ValueError(f"train_pixel_means of a fully visible model: {e}") from None


def check_no_gpu_products(settings) -> None:
    """Split products have nothing to compute on a fully visible model (its scan has no matrix products)."""
    if settings.gpu_products != "model":
        raise SettingsError(
            f"{{gpu_products}} {settings.gpu_products} has nothing to compute in a fully visible model (its "
            "single-site scan has no matrix products)",
            ("gpu_products",),
        )


def check_no_ti(settings, family: str) -> None:
    """Thermodynamic integration beside AIS runs on paths that declare their log-density's derivative in beta: a
    fully visible model's (a Boltzmann machine's path sums its hidden layers out)."""
    if settings.ti_chains:
        raise SettingsError(
            f"{{ti_chains}} runs thermodynamic integration on fully visible models; this is a model of the {family} "
            "family, whose path sums hidden units out (its derivative in beta is a posterior mean): drop {ti_chains}",
            ("ti_chains",),
        )


def fully_visible_macs(model, settings, n_test: int) -> float:
    """Multiply-adds of AIS and RAISE on a fully visible model: per chain and step, a palindromic scan (2 L site
    updates, each summing L q coupling entries) and the weight update's (L q)^2 product."""
    width = model.n_visible * model.num_states
    per_step = 2.0 * model.n_visible * width + float(width) ** 2
    raise_chains_total = min(settings.raise_examples, n_test) * settings.raise_chains
    return per_step * settings.steps * (settings.ais_chains + raise_chains_total)


def fully_visible_report_settings(model) -> dict:
    """The report's settings entries that describe a fully visible model (added keys; the others are shared)."""
    out = {"model": model.describe(), "sites": model.sites, "likelihood": "probability"}
    if model.alphabet is not None:
        out["alphabet"] = model.alphabet
    return out
