"""ablate.ops.serial: the same values and gradients as the plain computation, with torch's intra-op
threads at 1 while the forward and the backward run, and restored after."""

from __future__ import annotations

import pytest
import torch

from ablate.ops.serial import one_cpu_thread, serial


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("two_threads")
def test_serial_equals_the_plain_computation_on_one_thread() -> None:
    seen: list[int] = []

    def fn(P: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> tuple[torch.Tensor, ...]:
        seen.append(torch.get_num_threads())
        return torch.einsum("hij,hid->hjd", P, B), torch.einsum("ehi,hij->ehj", C, P).tanh()

    g = torch.Generator().manual_seed(0)
    P, B, C = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((4, 8, 8), (4, 8, 5), (5, 4, 8)))
    leaves = [t.clone().requires_grad_() for t in (P, B, C)]
    want = fn(*leaves)
    w = [torch.randn_like(t) for t in want]
    want_grads = torch.autograd.grad(want, leaves, w)
    leaves2 = [t.clone().requires_grad_() for t in (P, B, C)]
    got = serial(fn, *leaves2)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b.detach())
    assert seen[-1] == 1 and torch.get_num_threads() == 2

    in_backward: list[int] = []
    got[0].register_hook(lambda g: in_backward.append(torch.get_num_threads()))
    got_grads = torch.autograd.grad(got, leaves2, w)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)
    assert torch.get_num_threads() == 2
    # and gradcheck through the Function (first order: it is once differentiable)
    assert torch.autograd.gradcheck(lambda *t: serial(fn, *t), tuple(leaves2))


@pytest.mark.usefixtures("two_threads")
def test_serial_backward_runs_on_one_thread() -> None:
    seen: list[int] = []

    class Spy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205
            return x * 2

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205
            seen.append(torch.get_num_threads())
            return g * 2

    x = torch.randn(3, requires_grad=True)
    (y,) = serial(lambda t: (Spy.apply(t),), x)
    y.sum().backward()
    assert seen == [1] and torch.get_num_threads() == 2
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


@pytest.mark.usefixtures("two_threads")
def test_without_a_graph_it_is_a_plain_call_on_one_thread() -> None:
    seen: list[int] = []
    x = torch.randn(3)
    (y,) = serial(lambda t: (seen.append(torch.get_num_threads()) or t + 1,), x)
    assert torch.equal(y, x + 1) and seen == [1] and y.grad_fn is None
    with torch.no_grad():
        (z,) = serial(lambda t: (t * 3,), x.requires_grad_())
    assert z.grad_fn is None
    with one_cpu_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
