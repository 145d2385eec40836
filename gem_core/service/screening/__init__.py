"""Screen a compound library: predict and explain every molecule of a SMILES file
(with Mutagenicity's target, or a model trained on a user's table).

``python -m gem_core screen INPUT --out OUTPUT`` is :func:`screen`; the app's batch upload calls
:func:`explain_rows` on the uploaded rows. Modules: :mod:`.reader` (input rows),
:mod:`.chunk` (the chunk function and the output schema), :mod:`.output` (chunk files, manifest,
compaction), :mod:`.runner` (the run: this process, worker processes or Ray), :mod:`.wire`
(a parsed chunk's trip from a parsing worker to the process that runs the model on CUDA).
"""

from gem_core.runtime.lazy import lazy_exports

# Loaded on first use: the reader (and its missing-file message) without the chunk function's
# torch and pyarrow, for the CLI's input check.
__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "chunk": ("SCHEMA", "ScreenSettings", "explain_rows", "screen_schema"),
        "output": ("Summary", "csv_table"),
        "reader": ("InputRow", "iter_rows"),
        "runner": ("DEFAULT_CHUNK_SIZE", "ScreenResult", "default_workers", "screen"),
    },
)
