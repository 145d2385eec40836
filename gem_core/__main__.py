import sys

from gem_core.cli import main

sys.exit(main())
