"""A plugin whose compile hook takes an argument the spec does not have, so pluggy rejects it."""

from tritonplug.hookspecs import hookimpl
from tritonplug.records import BackendInfo, Binary, HostKernel, Options, Target


@hookimpl
def tritonplug_backend_info():
    return BackendInfo("broken_signature", ("broken_signature_platform",), "0.1.0", "compile hook has a bad signature")


@hookimpl
def tritonplug_detect_target(platform, device, requested):
    return Target("broken_signature", platform, "host", 1, None)


@hookimpl
def tritonplug_parse_options(target, call_options):
    return Options()


@hookimpl
def tritonplug_compile(job, extra):
    return Binary(job.kernel_name, "broken_signature")


@hookimpl
def tritonplug_make_kernel(target, binary, launch):
    return HostKernel(launch.kernel_name, lambda operands, results: None, launch)
