import sys

from scripts.capacity import main

sys.exit(main())
