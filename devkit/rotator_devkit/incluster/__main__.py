"""``python -m rotator_devkit.incluster``: see :mod:`rotator_devkit.incluster.main`."""

import sys

from rotator_devkit.incluster.main import main

sys.exit(main())
