"""spark-submit entry point of the aggregation job (the SparkApplication's mainApplicationFile).

    spark-submit spark/aggregation_job.py --config /etc/kct/aggregation/aggregation.yaml [--mode batch|stream|hourly]

Same arguments as `kct aggregate`; everything else lives in the `kct.aggregation` package (on PYTHONPATH in
the job image). The SparkSession that spark-submit configured is reused as is.
"""

from __future__ import annotations

import sys

from kct.aggregation.command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
