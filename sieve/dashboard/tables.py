"""Table settings the pages share: id columns wide enough for their longest id (ids that differ only at
the end, e.g. ``apollo-program-07`` / ``apollo-program-08``, never read alike), pinned, with the id
on hover; and cells without raw ``None`` / ``NaN``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

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


def no_raw_missing(df: "pd.DataFrame", blank: str = "") -> "pd.DataFrame":
    """``df`` with ``None`` / ``NaN`` in text (object) columns shown as ``blank``; numeric columns keep
    their type (Streamlit leaves their missing cells empty once they hold no ``None`` objects)."""
    import pandas as pd

    out = df.copy()
    for c in out.columns:
        col = out[c]
        if col.dtype == object:
            out[c] = [blank if (v is None or (isinstance(v, float) and pd.isna(v))) else v for v in col]
    return out


def shown(df: "pd.DataFrame", blank: str = "—", precision: int = 3) -> Any:
    """``df`` for ``st.dataframe`` with no raw ``None`` / ``NaN`` anywhere: text cells via
    :func:`no_raw_missing`, numeric cells through a Styler that displays ``blank`` for a missing value
    and rounds floats to ``precision`` (the data, and so sorting, stay numeric)."""
    return no_raw_missing(df, blank).style.format(na_rep=blank, precision=precision)
