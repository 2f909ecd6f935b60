"""``python -m anydevice`` runs the CLI."""

try:
    from anydevice.cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI loads: the shell's status, no traceback
    raise SystemExit(130) from None

raise SystemExit(main())
