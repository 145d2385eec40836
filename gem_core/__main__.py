"""``python -m gem_core``: the command line (:func:`gem_core.cli.main`).

Guarded, so that importing this module runs nothing: a ``spawn`` worker of a process started from
this file's path imports it again as ``__mp_main__`` (one started with ``-m`` does not).
"""

import sys

from gem_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
