"""A plugin that loads fine but whose detect_target hook raises a RuntimeError."""

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, HostKernel, Options


@hookimpl
def tritonplug_backend_info():
    return BackendInfo("broken_hook", ("cpu",), "0.1.0", "detect_target always raises")


@hookimpl
def tritonplug_detect_target(platform, device, requested):
    raise RuntimeError("the broken_hook device driver crashed")


@hookimpl
def tritonplug_parse_options(target, call_options):
    return Options()


@hookimpl
def tritonplug_compile(job):
    return Binary(job.kernel_name, "broken_hook")


@hookimpl
def tritonplug_make_kernel(target, binary, launch):
    return HostKernel(launch.kernel_name, lambda operands, results: None, launch)
