"""Infos: what an env reports besides its arrays, from the env to the API that hands it out.

    env.step() -> info dict
        |  worker (vecenv.worker.EnvGroup)
        v
    InfoEntry (records.py) ----------------------------------------------+
        |  a transport with rows both sides see (the process transport)  |  any other transport:
        v                                                                |  entries as they are
    InfoWriter packs it into its env's row (rows.py), under a schema     |
    of the one table of types (codec.py); InfoReader reads the rows      |
    back as InfoColumns (records viewed in place) or InfoEntry           |
        |                                                                |
        v                                                                v
    batch.py: gymnasium's dict of arrays with ``_key`` masks (batch_infos, batch_columns), or
    SB3's per-env dicts (per_env_infos)

The codec's table (:data:`~vecenv.infos.codec.TYPES`) is the one place that says what an info
value can be: how gymnasium batches it, how it packs into a row, whether it reads as a column,
and why it is not shared when it is not. A new kind of info value is a row of that table.
"""

from vecenv.infos.batch import (
    add_info,
    batch_columns,
    batch_infos,
    columns_infos,
    entries_as_columns,
    per_env_infos,
)
from vecenv.infos.codec import fits_row, why_not_shared
from vecenv.infos.records import NO_REPLY, InfoColumns, InfoEntry, InfoParts, StepReply
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
