"""``python -m bot``: the same as the ``upgradebot`` console script."""

import sys

from bot.shell.cli import main

sys.exit(main())
