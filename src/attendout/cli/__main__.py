"""``python -m attendout.cli``: the ``attendout`` command."""

import sys

from . import main

sys.exit(main())
