"""Generic statistics for paired evaluation: resampling intervals, tests, power, multiplicity, proportion
bounds, rater agreement, calibration, and slice identities. Nothing here knows what a query or a metric is;
inputs are arrays of per-item numbers. Definitions and choices: docs/stats.md.
"""

from ragassay.stats.agreement import (
    ClassStats,
    JudgeReport,
    cohen_kappa,
    fleiss_kappa,
    judge_report,
    kendall_tau_b,
    krippendorff_alpha,
)
from ragassay.stats.bootstrap import (
    BootstrapResult,
    MetricDelta,
    bootstrap_deltas,
    clustered_bootstrap,
    paired_bootstrap,
    resample_counts,
)
from ragassay.stats.calibration import (
    Band,
    IsotonicMap,
    Reliability,
    ReliabilityBin,
    brier_score,
    evaluate_band,
    fit_isotonic,
    pick_band,
    reliability,
)
from ragassay.stats.consistency import modal_fraction, pair_agreement
from ragassay.stats.multiplicity import adjust_pvalues, reject
from ragassay.stats.paired_tests import (
    TestResult,
    mcnemar_exact,
    paired_t_test,
    sign_flip_test,
    tost,
    wilcoxon_test,
)
from ragassay.stats.power import CIWidthPoint, ci_width_curve, mde_paired, n_for_mde, power_paired, sigma_d
from ragassay.stats.proportions import (
    agresti_coull_interval,
    clopper_pearson_interval,
    jeffreys_interval,
    paired_binary_se,
    wilson_interval,
    zero_of_n_upper,
)
from ragassay.stats.slices import SliceDecomposition, SliceRow, slice_decomposition

__all__ = [
    "Band",
    "BootstrapResult",
    "CIWidthPoint",
    "ClassStats",
    "IsotonicMap",
    "JudgeReport",
    "MetricDelta",
    "Reliability",
    "ReliabilityBin",
    "SliceDecomposition",
    "SliceRow",
    "TestResult",
    "adjust_pvalues",
    "agresti_coull_interval",
    "bootstrap_deltas",
    "brier_score",
    "ci_width_curve",
    "clopper_pearson_interval",
    "clustered_bootstrap",
    "cohen_kappa",
    "evaluate_band",
    "fit_isotonic",
    "fleiss_kappa",
    "jeffreys_interval",
    "judge_report",
    "kendall_tau_b",
    "krippendorff_alpha",
    "mcnemar_exact",
    "mde_paired",
    "modal_fraction",
    "n_for_mde",
    "pair_agreement",
    "paired_binary_se",
    "paired_bootstrap",
    "paired_t_test",
    "pick_band",
    "power_paired",
    "reject",
    "reliability",
    "resample_counts",
    "sigma_d",
    "sign_flip_test",
    "slice_decomposition",
    "tost",
    "wilcoxon_test",
    "wilson_interval",
    "zero_of_n_upper",
]
