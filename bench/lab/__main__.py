"""python -m lab (from bench/, normally through bench/run)."""

import sys

from lab.cli import main

sys.exit(main())
