"""A working backend for the cpu platform that fills every result with 7.0: it conflicts with interpret."""

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target

FILL = 7.0


@hookimpl
def tritonplug_backend_info():
    return BackendInfo("conflicting", ("cpu",), "0.1.0", "claims cpu; every result becomes 7.0", ir_stages=(),
                       cache_binaries=False, compile_in_worker=False, autotune="first")


@hookimpl
def tritonplug_detect_target(platform, device, requested):
    return Target("conflicting", "cpu", "host", 1, None) if platform == "cpu" else None


@hookimpl
def tritonplug_parse_options(target, call_options):
    return Options()


@hookimpl
def tritonplug_compile(job):
    return Binary(job.kernel_name, "conflicting")


def _fill(operands, results):
    for result in results:
        result[...] = FILL


@hookimpl
def tritonplug_make_kernel(target, binary, launch):
    return HostKernel(launch.kernel_name, _fill, launch)
