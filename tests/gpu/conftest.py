"""GPU suite (`make test-gpu`): every test here is marked gpu and FAILS, never
skips, when no GPU is present, so a GPU-less run can never look green."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(autouse=True)
def _require_gpu(request):
    if "gpu" not in request.keywords:
        return
    import torch
    if not torch.cuda.is_available():
        pytest.fail("no GPU visible to torch: the GPU suite must run on a GPU machine (make test-gpu)")


@pytest.fixture(scope="session")
def backend():
    import torch
    from pti_cli.backends.cuda import CudaBackend
    if not torch.cuda.is_available():
        pytest.fail("no GPU visible to torch")
    return CudaBackend()


@pytest.fixture(scope="session")
def backend_f16():
    import torch
    from pti_cli.backends.cuda import CudaBackend
    if not torch.cuda.is_available():
        pytest.fail("no GPU visible to torch")
    return CudaBackend(act_dtype=torch.float16)


@pytest.fixture(scope="session")
def backend_generic():
    import torch
    from pti_cli.backends.cuda import CudaBackend
    if not torch.cuda.is_available():
        pytest.fail("no GPU visible to torch")
    return CudaBackend(generic=True)
