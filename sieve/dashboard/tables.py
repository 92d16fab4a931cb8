"""Table settings the pages share: id columns wide enough for their longest id (ids that differ only at
the end, e.g. ``apollo-program-07`` / ``apollo-program-08``, never read alike), pinned, with the id
on hover; and cells without raw ``None`` / ``NaN``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: Pixels per character of the table font and the cell padding (Streamlit's data grid, 14 px font).
_PX_PER_CHAR, _PADDING, _MAX_PX = 8, 28, 520


def id_width(ids: Iterable[Any]) -> int:
    """A column width in pixels that shows the longest id in full (capped; longer ids wrap on hover)."""
    longest = max((len(str(i)) for i in ids), default=4)
    return min(_MAX_PX, _PADDING + _PX_PER_CHAR * max(longest, 4))


def id_column(label: str, ids: Iterable[Any], help: str | None = None) -> Any:
    """``st.column_config.TextColumn`` for an id column: as wide as its longest id, pinned left."""
    import streamlit as st

    return st.column_config.TextColumn(label, width=id_width(ids), pinned=True,
                                       help=help or "The document id (in full; hover a cell to see it alone).")


def id_config(df: "pd.DataFrame", columns: Iterable[str] = ("id", "doc_id", "neighbour")) -> dict[str, Any]:
    """``column_config`` entries for the id columns of ``df`` that exist."""
    return {c: id_column(c, df[c].tolist()) for c in columns if c in df.columns}


#: What a missing number is stored as in a table handed to ``st.dataframe``. Streamlit's data grid
#: draws every null cell as a grey "None" and ignores a Styler's ``na_rep`` for it, but it shows a
#: Styler's display text for any cell that holds a value: so a missing number becomes this value
#: (never a real score), displayed as the blank text, and the column stays numeric (sortable; the
#: missing cells sort last in ascending order). It stays below JavaScript's largest safe integer:
#: the grid shows a larger number raw, with a warning mark. :func:`as_missing` turns it back into NaN.
MISSING = 9.0e15


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(v != v)   # NaN, pd.NA-like
    except (TypeError, ValueError):
        return False


def _numeric(col: "pd.Series") -> bool:
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(col.dtype)) and not pd.api.types.is_bool_dtype(col.dtype)


def no_raw_missing(df: "pd.DataFrame", blank: str = "") -> "pd.DataFrame":
    """``df`` with ``None`` / ``NaN`` in every text column (object, or pandas' ``str`` dtype) shown as
    ``blank``; numeric columns keep their type (see :func:`shown` for their missing cells)."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if not _numeric(col):
            out[c] = _object([blank if _is_missing(v) else v for v in col], out.index)
    return out


def _object(values: list[Any], index: Any) -> "pd.Series":
    import pandas as pd

    return pd.Series(values, index=index, dtype=object)


def shown(df: "pd.DataFrame", blank: str = "—", precision: int = 3) -> Any:
    """``df`` for ``st.dataframe`` with no raw ``None`` / ``NaN`` anywhere: text cells via
    :func:`no_raw_missing`, missing numbers stored as :data:`MISSING` and displayed as ``blank``
    through a Styler that also rounds floats to ``precision`` (the data, and so sorting, stay
    numeric; an infinite score reads ∞)."""
    out = no_raw_missing(df, blank)
    fmt: dict[str, Any] = {}
    for c in out.columns:
        col = out[c]
        if not _numeric(col):
            continue
        if bool(col.isna().any()):
            out[c] = col.astype(float).fillna(MISSING)
        fmt[c] = _formatter(blank, precision, integer=bool(np.issubdtype(out[c].dtype, np.integer)))
    return out.style.format(fmt, na_rep=blank)


def _formatter(blank: str, precision: int, integer: bool) -> Any:
    def f(v: Any) -> str:
        if _is_missing(v) or v == MISSING:
            return blank
        if integer:
            return f"{int(v):d}"
        x = float(v)
        if np.isinf(x):
            return "∞" if x > 0 else "−∞"
        if x.is_integer() and abs(x) < 1e15 and precision == 0:
            return f"{int(x):d}"
        return f"{x:.{precision}f}"
    return f


def as_missing(df: "pd.DataFrame") -> "pd.DataFrame":
    """The data of a :func:`shown` table with :data:`MISSING` read back as NaN (tests, exports)."""
    out = df.copy()
    for c in out.columns:
        if _numeric(out[c]):
            out[c] = out[c].mask(out[c] == MISSING)
    return out
