"""``python -m hpctrain.command``: one rank of a command job (see ``hpctrain.command.rank``)."""

import sys

from hpctrain.command.rank import main

if __name__ == "__main__":
    sys.exit(main())
