"""Screen a compound library: predict and explain every molecule of a SMILES file.

``python -m gem_core screen INPUT --out OUTPUT`` is :func:`screen`; the app's batch upload calls
:func:`explain_rows` on the uploaded rows. Modules: :mod:`.reader` (input rows),
:mod:`.chunk` (the chunk function and the output schema), :mod:`.output` (chunk files, manifest,
compaction), :mod:`.runner` (the run: this process, worker processes or Ray).
"""
from gem_core.service.screening.chunk import SCHEMA, ScreenSettings, explain_rows
from gem_core.service.screening.output import Summary, csv_table
from gem_core.service.screening.reader import InputRow, iter_rows
from gem_core.service.screening.runner import (DEFAULT_CHUNK_SIZE, ScreenResult, default_workers,
                                               screen)

__all__ = ["SCHEMA", "ScreenSettings", "explain_rows", "Summary", "csv_table", "InputRow",
           "iter_rows", "DEFAULT_CHUNK_SIZE", "ScreenResult", "default_workers", "screen"]
