"""``python -m ctxemb``: the command line (and what ``torchrun -m ctxemb`` runs on every rank)."""

import sys

from ctxemb.cli import main

sys.exit(main())
