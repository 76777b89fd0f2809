"""The checkpoint staging's CUDA paths: buffers foreseen before the first step, pinned in shared
memory, handed to the state by shape, and the ones it did not need unpinned again.

Without CUDA (CI, the login node) this test is skipped, and says so: pinning needs a GPU driver.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: pinning and cudaHostRegister need one", allow_module_level=True)

from hpctrain.runtime.staging import HostStaging  # noqa: E402


@pytest.mark.parametrize("shared", [True, False])
def test_foreseen_pinned_buffers_serve_the_state_and_the_rest_are_unpinned(shared: bool) -> None:
    staging = HostStaging(cuda=True, shared=shared)
    staging.reserve_like([((1024,), torch.float32), ((4096,), torch.bfloat16)])
    state = {"w": torch.randn(1024, device="cuda"), "b": torch.randn(7, device="cuda")}
    staging.reserve(state)
    staged = staging.stage(state).result(timeout=60)
    staging.close()
    assert staging.foreseen_bytes == 1024 * 4
    assert staging.buffers["/w"].is_pinned() and staging.buffers["/b"].is_pinned()
    assert torch.equal(staged["w"], state["w"].cpu()) and torch.equal(staged["b"], state["b"].cpu())
