"""``python -m gem_core``: the command line (:func:`gem_core.cli.main`).

Guarded, because a worker process started with the ``spawn`` method (the screen's parsing workers
on CUDA) imports this module again under the name ``__mp_main__``: unguarded, each worker ran the
command line on its own arguments and died, and the pool broke.
"""
import sys

from gem_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
