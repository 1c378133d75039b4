import sys

from patchseries.cli import main

sys.exit(main())
