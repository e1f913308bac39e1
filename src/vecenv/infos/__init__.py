"""Infos: what an env reports besides its arrays, from the env to the API that hands it out.

A worker's env group reports each env's info as an :class:`InfoEntry`. The process transport
packs them into rows both sides see (rows.py: :class:`InfoWriter` / :class:`InfoReader`, under
schemas of the one table of value types, codec.py) and reads them back as :class:`InfoColumns`
or entries; other transports hand entries over as they are. batch.py defines the records and
turns them into gymnasium's dict of arrays with ``_key`` masks, or SB3's per-env dicts. A new
kind of info value is a row of the codec's table (:data:`~vecenv.infos.codec.TYPES`).
"""

from vecenv.infos.batch import (
    NO_REPLY,
    InfoColumns,
    InfoEntry,
    InfoParts,
    StepReply,
    add_info,
    batch_columns,
    batch_infos,
    columns_infos,
    entries_as_columns,
    per_env_infos,
)
from vecenv.infos.codec import fits_row, why_not_shared
from vecenv.infos.rows import IN_ROWS, InfoReader, InfoRows, InfoWriter, RowsReply, rows_round_trip

__all__ = [
    "IN_ROWS",
    "NO_REPLY",
    "InfoColumns",
    "InfoEntry",
    "InfoParts",
    "InfoReader",
    "InfoRows",
    "InfoWriter",
    "RowsReply",
    "StepReply",
    "add_info",
    "batch_columns",
    "batch_infos",
    "columns_infos",
    "entries_as_columns",
    "fits_row",
    "per_env_infos",
    "rows_round_trip",
    "why_not_shared",
]
