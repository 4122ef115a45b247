"""Generic statistics for paired evaluation: resampling intervals, tests, power, multiplicity, proportion
bounds, rater agreement, calibration, and slice identities. Nothing here knows what a query or a metric is;
inputs are arrays of per-item numbers. Definitions and choices: docs/stats.md.

Names are imported on first use (PEP 562): importing one submodule does not load scipy.stats for the rest.
"""

from __future__ import annotations

from ragassay._lazy import lazy_exports

_EXPORTS = {
    "ClassStats": "agreement", "JudgeReport": "agreement", "cohen_kappa": "agreement", "fleiss_kappa": "agreement",
    "judge_report": "agreement", "kendall_tau_b": "agreement", "krippendorff_alpha": "agreement",
    "BootstrapResult": "bootstrap", "MetricDelta": "bootstrap", "bootstrap_deltas": "bootstrap",
    "clustered_bootstrap": "bootstrap", "paired_bootstrap": "bootstrap", "resample_counts": "bootstrap",
    "Band": "calibration", "IsotonicMap": "calibration", "Reliability": "calibration",
    "ReliabilityBin": "calibration", "brier_score": "calibration", "evaluate_band": "calibration",
    "fit_isotonic": "calibration", "pick_band": "calibration", "reliability": "calibration",
    "modal_fraction": "consistency", "pair_agreement": "consistency", "adjust_pvalues": "multiplicity",
    "reject": "multiplicity", "TestResult": "paired_tests", "mcnemar_exact": "paired_tests",
    "paired_t_test": "paired_tests", "sign_flip_test": "paired_tests", "tost": "paired_tests",
    "wilcoxon_test": "paired_tests", "CIWidthPoint": "power", "ci_width_curve": "power", "mde_paired": "power",
    "n_for_mde": "power", "power_paired": "power", "sigma_d": "power", "agresti_coull_interval": "proportions",
    "clopper_pearson_interval": "proportions", "jeffreys_interval": "proportions",
    "paired_binary_se": "proportions", "wilson_interval": "proportions", "zero_of_n_upper": "proportions",
    "SliceDecomposition": "slices", "SliceRow": "slices", "slice_decomposition": "slices",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
