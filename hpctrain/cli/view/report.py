"""What `report` and `sweep report` print: the summary page, each figure, and notes as warnings."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpctrain.report.build import Written


def show(written: Written) -> None:
    for note in written.notes:
        print(f"hpctrain: warning: {note}", file=sys.stderr)
    print(f"report: {written.summary}")
    for path in written.figures:
        print(f"figure: {path}")
    if written.time_split:
        print("where the time went:")
        for line in written.time_split:
            print(f"  {line}")
