"""`python -m solution`: the same as the `solution` command."""

import sys

from .tools.cli import main

sys.exit(main())
