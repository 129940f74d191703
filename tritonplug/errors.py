"""Exception classes raised by tritonplug."""


class TritonplugError(Exception):
    """Base class of every error tritonplug raises on its own account."""


class PluginError(TritonplugError, RuntimeError):
    """A backend plugin is missing, broken, or conflicts with another."""


class CompileError(TritonplugError, RuntimeError):
    """Compiling a kernel failed: the compiler raised, crashed or timed out."""


class WorkerError(CompileError):
    """A compile worker died or exceeded its timeout while compiling a job."""


class KernelSourceError(CompileError):
    """Triton's front end rejected the kernel; the message points at the kernel's source line."""


class KernelImportError(TritonplugError, ImportError):
    """A name of a library module loaded by ``tritonplug.kernels_of`` without importing the module
    needs something that does not import here (usually torch); the message names it and where."""


class PartitionError(TritonplugError, ValueError):
    """A ``tritonplug.partitioned`` function failed when traced with one shard's shapes; the message names the
    function and the shapes, and the error it raised is the cause."""


class OutOfResourcesError(TritonplugError, ValueError):
    """No configuration of a call fits the target: each compiled kernel needs more shared memory than one block
    may use there (Triton's ``OutOfResources``); the message names the kernel, each configuration and its need,
    and the target's limit."""
