"""A pack computes each instance's shape-dependent kernels as the instance alone does.

``gem_core/explainers/_alone.py`` measures on this machine which elements a sigmoid computes with
its scalar loop and which row counts a linear layer rounds apart; these tests check the result:
values and gradients equal, to the last bit, to one call per instance.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gem_core.explainers._alone import (PackAsAlone, linear_rounding, sigmoid_as_alone,
                                        sigmoid_block, tail_mask)

torch.set_num_threads(1)


def test_tail_mask_marks_what_each_segment_alone_leaves_past_its_last_full_block():
    lengths = torch.tensor([3, 5, 0, 2])
    expected = [False, False, True, False, False, False, False, True, False, False]
    assert tail_mask(lengths, 2).tolist() == expected
    assert not tail_mask(lengths, 1).any()  # block 1: every element vectorised


@pytest.mark.parametrize("lengths", [[1, 5, 31, 32, 33, 64, 100, 0, 7],
                                     [150 + (i * 37) % 90 for i in range(300)]])  # > 32,768
def test_sigmoid_as_alone_equals_a_sigmoid_per_segment(lengths):
    block = sigmoid_block()
    if block == 0:
        pytest.skip("this CPU's sigmoid code paths follow no known pattern")
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(sum(lengths), generator=gen, requires_grad=True)
    grad = torch.randn(sum(lengths), generator=gen)
    packed = sigmoid_as_alone(x, tail_mask(torch.tensor(lengths), block), block)
    (packed_grad,) = torch.autograd.grad(packed, x, grad)
    alone, alone_grad = [], []
    for part, g in zip(x.detach().split(lengths), grad.split(lengths)):
        leaf = part.clone().requires_grad_(True)
        y = leaf.sigmoid()
        alone.append(y.detach())
        alone_grad.append(torch.autograd.grad(y, leaf, g)[0] if part.numel() else part)
    assert torch.equal(packed.detach(), torch.cat(alone))
    assert torch.equal(packed_grad, torch.cat(alone_grad))


@pytest.mark.parametrize("layer", [nn.Linear(60, 2), nn.Linear(14, 20), nn.Linear(20, 20)],
                         ids=["head", "first", "hidden"])
def test_a_packed_linear_layer_gives_each_instance_its_own_rows_and_gradients(layer):
    """Instances of 1, 2, 3, 5, 20 and 1 rows: the packed layer's rows and input gradients equal
    one call per instance, where the layer's product does not round rows by their position."""
    sizes = torch.tensor([1, 2, 3, 5, 20, 1])
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(int(sizes.sum()), layer.in_features, generator=gen, requires_grad=True)
    grad = torch.randn(int(sizes.sum()), layer.out_features, generator=gen)
    layer.requires_grad_(False)
    alone = PackAsAlone(layer, [sizes], torch.ones(1, dtype=torch.long), torch.device("cpu"))
    with alone:
        out = layer(x)
    (out_grad,) = torch.autograd.grad(out, x, grad)
    rows, grads = [], []
    for part, g in zip(x.detach().split(sizes.tolist()), grad.split(sizes.tolist())):
        leaf = part.clone().requires_grad_(True)  # its own tensor, aligned as PyTorch allocates
        y = layer(leaf)
        rows.append(y.detach())
        grads.append(torch.autograd.grad(y, leaf, g.clone())[0])
    if linear_rounding(layer).exact:
        assert torch.equal(out.detach(), torch.cat(rows))
        assert torch.equal(out_grad, torch.cat(grads))
    else:
        assert torch.allclose(out.detach(), torch.cat(rows), atol=1e-6)
    # the hooks are gone: the layer is a plain linear layer again
    assert torch.equal(layer(x.detach()), F.linear(x.detach(), layer.weight, layer.bias))
    assert not layer._forward_hooks
