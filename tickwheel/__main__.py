"""``python -m tickwheel`` is the ``tickwheel`` command."""

import sys

from tickwheel.cli import main

sys.exit(main())
