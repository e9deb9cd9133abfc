from chaosproxy.cli.main import main

raise SystemExit(main())
