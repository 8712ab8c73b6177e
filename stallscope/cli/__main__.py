"""`python -m stallscope.cli`: the same entry point as the `stallscope` console script."""

import sys

from stallscope.cli import main

sys.exit(main())
