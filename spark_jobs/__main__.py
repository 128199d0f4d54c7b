"""``python -m spark_jobs``: run the streaming job (see :mod:`spark_jobs.job`)."""

import sys

from .job import main

sys.exit(main())
