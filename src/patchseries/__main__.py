from patchseries.cli import main

raise SystemExit(main())
