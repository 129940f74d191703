from tritonplug.cli.main import main

raise SystemExit(main())
