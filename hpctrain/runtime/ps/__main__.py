"""`python -m hpctrain.runtime.ps`: run this rank's role; `--check-result`: exit 0 iff training finished."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hpctrain import spec
from hpctrain.runtime.ps import finished, run


def main() -> None:
    folder = os.environ.get("HPCTRAIN_RUN_DIR")
    if not folder:
        sys.exit("hpctrain ps: HPCTRAIN_RUN_DIR is not set")
    if sys.argv[1:] == ["--check-result"]:
        sys.exit(0 if finished(folder) else 1)
    resolved = spec.loads((Path(folder) / "spec.json").read_bytes())
    run(resolved, run_dir=folder)


if __name__ == "__main__":
    main()
