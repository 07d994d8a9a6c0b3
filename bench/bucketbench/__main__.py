# SPDX-License-Identifier: Apache-2.0
"""python3 -m bucketbench: the benchmark's command, also run by bench/run."""
import sys

from .cli import main

sys.exit(main())
