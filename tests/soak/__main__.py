"""``python -m tests.soak [--minutes N] [--seed S]``: what ``make soak`` runs."""

import sys

from tests.soak.harness import main

sys.exit(main())
