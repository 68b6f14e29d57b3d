"""Runtime plumbing shared by the tools and the service: numba's cache, its threads and BLAS probe,
the notice while kernels compile, the copy loop of numba code and the names of the worker's threads."""
