"""The judge's shared GPU arena (kgen.harness.gpu_share): closing it while this process still has work queued on
it must not fault that work. GPU only: the VMM allocation needs a CUDA driver (skipped without one)."""
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_closing_the_arena_waits_for_work_queued_on_it():
    from kgen.harness.gpu_share import CudaArena

    arena = CudaArena.create(256 << 20, 0)
    view = arena.bytes.view(torch.float32)
    source = torch.randn(view.numel(), device="cuda:0")
    torch.cuda.synchronize()
    for _ in range(50):  # ~50 x 256 MB of copies into the arena, queued and not waited for
        view.copy_(source, non_blocking=True)
    host = torch.empty(view.numel(), dtype=torch.float32, pin_memory=True)
    host.copy_(view, non_blocking=True)  # and a copy out of it to page-locked memory, as kept copies do
    arena.close()  # without waiting, the unmap lands under these copies and faults them
    torch.cuda.synchronize()  # an illegal address in this context would be raised here
    assert torch.equal(host, source.cpu())
    assert torch.ones(4, device="cuda:0").sum().item() == 4.0  # the context still works
