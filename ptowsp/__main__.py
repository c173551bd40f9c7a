"""`python -m ptowsp ...`: the `ptowsp` command, for an environment whose scripts are not on PATH."""

import sys

from ptowsp.cli import main

sys.exit(main())
