"""GPU kernel names (from a profiler, Nsight or a trace) -> what each kernel is
and where its code is: `names` parses and demangles, library kernels are named
by the vendor table (`kernelmap.vendors`), `resolve` maps ATen kernels to their launcher
template and their functor or lambda in an indexed source tree.

    from kernelmap.kernels import open_resolver
    resolver, reason = open_resolver("debian-2.6.0")
    print(resolver.resolve("void at::native::vectorized_elementwise_kernel<4, ...>").to_text())
"""

from kernelmap.kernels.names import KernelName, demangle, parse
from kernelmap.kernels.resolve import KernelAnswer, KernelResolver, Site, open_resolver

__all__ = ["KernelAnswer", "KernelName", "KernelResolver", "Site", "demangle", "open_resolver", "parse"]
