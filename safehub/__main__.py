"""``python -m safehub``: the same as the ``safehub`` command."""

import sys

from safehub.cli import main

sys.exit(main())
