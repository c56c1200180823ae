import sys

from scripts.capacity.cli import main

sys.exit(main())
