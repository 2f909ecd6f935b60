"""A plugin whose registration hook raises."""

from anydevice.contract.hookspecs import hookimpl


@hookimpl
def anydevice_register_devices(register):  # type: ignore[no-untyped-def]
    raise ValueError("bad configuration file")
