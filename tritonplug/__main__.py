from tritonplug.cli import main

raise SystemExit(main())
