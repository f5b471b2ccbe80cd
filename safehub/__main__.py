"""``python -m safehub``: the same as the ``safehub`` command."""

import sys

from safehub._cli import main

sys.exit(main())
