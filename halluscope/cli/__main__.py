"""`python -m halluscope.cli`, as the `halluscope` script."""

import sys

from halluscope.cli import main

sys.exit(main())
