from agentcoordmcp.server import main

raise SystemExit(main())
