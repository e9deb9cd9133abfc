from chaosproxy.cli import main

raise SystemExit(main())
