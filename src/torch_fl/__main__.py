"""``python -m torch_fl``: the ``torchfl`` command, for environments without the console script."""

import sys

from torch_fl.cli import main

sys.exit(main())
