import sys

from tpnode_tui.cli import main

sys.exit(main())
