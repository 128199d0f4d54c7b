"""The Spark job as ``spark-submit`` runs it on a cluster (docker-compose.yml's ``job``):
``spark-submit --master spark://spark-master:7077 docker/job.py``. The same job as
``python -m spark_jobs``; its settings come from ``PENUMBRA_*`` variables."""

import sys

from spark_jobs.job import main

sys.exit(main())
