"""Slow plugin 3 of ten (tests/hostile): its import takes a second."""

from anydevice_tenslow.common import arrive, registration

arrive(__name__)
anydevice_register_devices = registration(__name__)
