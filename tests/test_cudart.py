"""bench.measure.cudart without a GPU: what a bound copy hands cudaMemcpyAsync, and a failed one."""
from types import SimpleNamespace

import pytest
import torch

from bench.measure import cudart


def test_a_copier_reads_its_copy_once_and_says_which_error_a_failed_copy_gave(monkeypatch):
    calls, code = [], [0]
    monkeypatch.setattr(cudart, "_memcpy_async", lambda: lambda *args: calls.append(args) or code[0])
    stream = SimpleNamespace(cuda_stream=7)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: stream)
    dst, src = torch.empty(1024, dtype=torch.float32), torch.ones(1024, dtype=torch.float32)
    issue = cudart.copier(dst, src)
    stream.cuda_stream = 9   # a run of copies stays on the stream current when it was bound
    issue()
    issue()
    assert calls == [(dst.data_ptr(), src.data_ptr(), 4096, cudart.MEMCPY_DEFAULT, 7)] * 2
    cudart.copy(dst, src)    # one copy binds the stream current now
    assert calls[-1][-1] == 9
    code[0] = 1
    with pytest.raises(RuntimeError, match="cudaMemcpyAsync failed: cudaError_t 1"):
        issue()
