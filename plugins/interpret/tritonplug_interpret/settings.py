"""The CPU backend's ``TRITONPLUG_*`` settings: declared to the host by ``tritonplug_declare_settings``, read by
this plugin with ``setting.get()`` (validated and typed then), and nowhere else in it."""

from __future__ import annotations

from tritonplug import plugin_kit

OWNER = "interpret"

CHECK = plugin_kit.boolean("TRITONPLUG_INTERPRET_CHECK", "out-of-bounds checks on the CPU backend (both paths)", False,
                           owner=OWNER)
PATH = plugin_kit.choice("TRITONPLUG_CPU_PATH", "how the CPU backend runs kernels: compiled by XLA (the interpreter "
                         "as fallback), or in Triton's interpreter", ("xla", "interpret"), "xla", owner=OWNER)

#: Every setting of this backend, in its table's order.
ALL = (CHECK, PATH)
