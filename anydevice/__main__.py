"""``python -m anydevice`` runs the CLI."""

from anydevice.cli import main

raise SystemExit(main())
