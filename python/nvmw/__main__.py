import sys

from nvmw.cli import main

sys.exit(main())
