"""``kraft-analyze``: the PySpark analysis of simulation traces (issue #7).

Only ``--help`` works today; the Spark job lands with the Parquet trace schema.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``kraft-analyze``."""
    parser = argparse.ArgumentParser(
        prog="kraft-analyze",
        description="Check and summarise simulation traces with PySpark (local[*] or --master).",
    )
    parser.add_argument("trace_dir", help="directory of run traces")
    parser.add_argument("--master", default="local[*]", help="Spark master URL")
    parser.add_argument("--out", default=None, help="report directory")
    parser.parse_args(argv)
    print("kraft-analyze: not yet available (the Spark job arrives with issue #7)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
