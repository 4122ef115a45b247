"""The padded grade matrix every ranking metric reduces over.

A run over Q queries becomes ``grades`` (Q x D, the grade of the document at each rank, NaN = unjudged or past
the end of the ranking), ``lengths`` (how many ranks each query really has), and ``judged`` (Q x J, every
judged grade of the query from the labels, sorted descending, NaN padded). Relevant counts and ideal gains come
from ``judged``, never from the ranking. ``entries`` lists the judged cells of ``grades`` as (row, col, grade)
arrays; metrics reduce over them, so their cost follows the number of judged results, not queries x depth.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragassay.errors import InputError


def pad_ragged(values: np.ndarray, lengths: np.ndarray, width: int | None = None) -> np.ndarray:
    """Scatter a flat array cut into rows of ``lengths`` into a NaN-padded (rows x width) float matrix."""
    lengths = np.asarray(lengths, dtype=np.int64)
    width = int(lengths.max(initial=0)) if width is None else width
    out = np.full((len(lengths), width), np.nan)
    if values.size:
        starts = np.cumsum(lengths) - lengths
        row = np.repeat(np.arange(len(lengths)), lengths)
        col = np.arange(values.size) - np.repeat(starts, lengths)
        out[row, col] = values
    return out


class GradeMatrix:
    """Grades of a whole run, ready for vectorized metrics (see module docstring).

    ``entries`` (row, col, grade) must hold exactly the non-NaN cells of ``grades``, each row's cells
    contiguous and in ascending column order; it is derived from ``grades`` when not given. Given
    ``entries`` alone (as the join in :mod:`ragassay.metrics.trec` does), ``grades`` is built on first
    access: the metrics reduce over ``entries`` and never need it. ``depth`` then defaults to the longest
    ranking. ``label_cache`` keeps terms that
    depend only on ``judged`` (relevant counts, ideal DCG) between matrices that share the same read-only
    ``judged`` array, as every run joined against one :class:`~ragassay.metrics.trec.Qrels` does.
    """

    def __init__(
        self,
        *,
        query_ids: np.ndarray,
        lengths: np.ndarray,
        judged: np.ndarray,
        missing: np.ndarray,
        grades: np.ndarray | None = None,
        ties: str = "given",
        entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        label_cache: dict | None = None,
        depth: int | None = None,
    ) -> None:
        q = len(query_ids)
        if grades is None and entries is None:
            raise InputError("a GradeMatrix needs grades or entries (row, col, grade)")
        if grades is not None and (grades.ndim != 2 or grades.shape[0] != q):
            raise InputError(f"grades must be (queries x depth) with {q} rows, got shape {grades.shape}")
        if judged.ndim != 2 or judged.shape[0] != q:
            raise InputError(f"judged must be (queries x J) with {q} rows, got shape {judged.shape}")
        if lengths.shape != (q,) or missing.shape != (q,):
            raise InputError("lengths and missing must have one entry per query")
        if grades is not None:
            depth = grades.shape[1]
        elif depth is None:
            depth = int(lengths.max(initial=0))
        if np.any(lengths > depth) or np.any(lengths < 0):
            raise InputError("lengths must lie between 0 and the matrix depth")
        if entries is None:
            row, col = np.nonzero(~np.isnan(grades))
            entries = (row, col, grades[row, col])
        elif not len(entries[0]) == len(entries[1]) == len(entries[2]):
            raise InputError("entries must be three arrays of equal length: row, col, grade")
        if label_cache is not None and judged.flags.writeable:
            raise InputError("a label_cache needs a read-only judged array (judged.flags.writeable = False)")
        self.query_ids, self.lengths, self.judged, self.missing = query_ids, lengths, judged, missing
        self.ties, self.entries, self.label_cache = ties, entries, label_cache
        self._grades, self._depth = grades, depth

    def __repr__(self) -> str:
        return f"GradeMatrix({self.n_queries} queries x depth {self.depth}, ties={self.ties!r})"

    @property
    def grades(self) -> np.ndarray:
        """(queries x depth) grade of each rank; NaN = unjudged or past the end of the ranking."""
        if self._grades is None:
            row, col, grade = self.entries
            grades = np.full((self.n_queries, self._depth), np.nan)
            grades[row, col] = grade
            self._grades = grades
        return self._grades

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def valid(self) -> np.ndarray:
        """Boolean (Q x D): True where a rank holds a returned document."""
        return np.arange(self.depth)[None, :] < self.lengths[:, None]

    @classmethod
    def from_lists(
        cls,
        query_ids: Sequence[str],
        ranked_grades: Sequence[Sequence[float]],
        judged_grades: Sequence[Sequence[float]],
        missing: Sequence[bool] | None = None,
    ) -> GradeMatrix:
        """Build from per-query lists: the grade at each rank (NaN/None = unjudged) and all judged grades.

        ``missing`` marks queries the system returned nothing for (scored as empty rankings and counted).
        """
        n = len(query_ids)
        if len(ranked_grades) != n or len(judged_grades) != n:
            raise InputError(
                f"from_lists: {n} query ids but {len(ranked_grades)} rankings and {len(judged_grades)} label lists"
            )
        r_len = np.fromiter((len(r) for r in ranked_grades), dtype=np.int64, count=n)
        j_len = np.fromiter((len(j) for j in judged_grades), dtype=np.int64, count=n)
        r_flat = np.array([np.nan if g is None else g for r in ranked_grades for g in r], dtype=np.float64)
        j_flat = np.array([np.nan if g is None else g for j in judged_grades for g in j], dtype=np.float64)
        if np.isnan(j_flat).any():
            raise InputError("from_lists: judged grades must be numbers (a judged document has a grade)")
        judged = -np.sort(-pad_ragged(j_flat, j_len), axis=1)
        miss = np.zeros(n, dtype=bool) if missing is None else np.asarray(missing, dtype=bool)
        if miss.shape != (n,):
            raise InputError(f"from_lists: missing must have {n} entries")
        return cls(
            query_ids=np.asarray(query_ids, dtype=object),
            grades=pad_ragged(r_flat, r_len),
            lengths=r_len,
            judged=judged,
            missing=miss,
        )
