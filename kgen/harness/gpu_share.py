"""GPU memory shared between the judge and a sandboxed runner, through the CUDA driver's virtual
memory management API (cuMemCreate with a POSIX file-descriptor handle).

Why not torch's CUDA IPC (cudaIpcGetMemHandle, what torch.multiprocessing uses): legacy IPC handles
cannot be opened from another PID namespace, and the runner has its own. A VMM allocation exported as
a file descriptor is just a descriptor: it crosses the Unix socket (SCM_RIGHTS), and the runner
imports and maps it. The judge owns the allocation; the runner only maps it, so nothing the runner
does can make the judge touch memory other than its own.

The mapped range is wrapped as a torch tensor through `__cuda_array_interface__` (torch does not own
it; the arena object keeps the mapping alive). Driver calls run on the calling thread's current
context, which torch has made the device's primary context before any of this is called.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class CudaShareError(RuntimeError):
    pass


_driver: Optional[ctypes.CDLL] = None


def _cuda() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise CudaShareError(f"{what} failed: {name.value.decode() if name.value else result}")


def _prop(device_index: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, device_index)
    return prop


class _CudaRange:
    """What torch.as_tensor reads: a device pointer and a byte count."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class CudaArena:
    """A shared GPU allocation mapped into this process: created by the judge, attached by the runner."""

    kind = "cuda"

    def __init__(self, handle: int, ptr: int, size: int, device_index: int, fd: Optional[int]):
        import torch

        self.handle, self.ptr, self.size, self.device_index, self.fd = handle, ptr, size, device_index, fd
        self.bytes = torch.as_tensor(_CudaRange(ptr, size), device=f"cuda:{device_index}")

    @staticmethod
    def _granular(size: int, device_index: int) -> int:
        granularity = ctypes.c_size_t()
        prop = _prop(device_index)
        _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop),
                                                     CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
               "cuMemGetAllocationGranularity")
        g = granularity.value
        return max(g, (size + g - 1) // g * g)

    @staticmethod
    def _map(handle: int, size: int, device_index: int) -> int:
        cuda = _cuda()
        ptr = ctypes.c_uint64()
        _check(cuda.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                        ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
        _check(cuda.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                             ctypes.c_uint64(0)), "cuMemMap")
        access = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device_index), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        _check(cuda.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
               "cuMemSetAccess")
        return ptr.value

    @classmethod
    def create(cls, size: int, device_index: int) -> CudaArena:
        """A new allocation of at least `size` bytes on the device, exportable as a descriptor."""
        import torch

        torch.cuda.synchronize(device_index)  # makes the device's primary context current on this thread
        size = cls._granular(size, device_index)
        cuda = _cuda()
        handle = ctypes.c_uint64()
        prop = _prop(device_index)
        _check(cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0)),
               "cuMemCreate")
        fd = ctypes.c_int(-1)
        _check(cuda.cuMemExportToShareableHandle(ctypes.byref(fd), handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                 ctypes.c_uint64(0)), "cuMemExportToShareableHandle")
        ptr = cls._map(handle.value, size, device_index)
        return cls(handle.value, ptr, size, device_index, fd.value)

    @classmethod
    def attach(cls, size: int, fd: int, device_index: int) -> CudaArena:
        """Map the allocation behind a descriptor the judge sent."""
        import torch

        torch.cuda.synchronize(device_index)
        size = cls._granular(size, device_index)  # the judge rounded its allocation up the same way
        cuda = _cuda()
        handle = ctypes.c_uint64()
        _check(cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle")
        os.close(fd)
        ptr = cls._map(handle.value, size, device_index)
        return cls(handle.value, ptr, size, device_index, None)

    def tensor(self, region):
        import torch

        dtype = getattr(torch, region.dtype)
        nbytes = region.numel * torch.empty((), dtype=dtype).element_size()
        return self.bytes[region.offset:region.offset + nbytes].view(dtype).view(region.shape)

    def close(self) -> None:
        import torch

        # Work this process queued on the range (a poison fill, a non-blocking copy to the host, a float64
        # reference reading its inputs) may still be running when an evaluation ends early: unmapping under
        # it faults that kernel, and the fault surfaces at this context's next call as an illegal address.
        torch.cuda.synchronize(self.device_index)
        cuda = _cuda()
        self.bytes = None
        cuda.cuMemUnmap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size))
        cuda.cuMemAddressFree(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.size))
        cuda.cuMemRelease(ctypes.c_uint64(self.handle))
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
