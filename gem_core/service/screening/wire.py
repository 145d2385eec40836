"""A parsed chunk as bytes, for the trip from a parsing worker to the process that holds the GPU.

Two costs decide how fast ``screen --device cuda --workers N`` goes, since one process runs the
model for all workers: what it takes to send a chunk, and what it takes to receive one.

* multiprocessing pickles a worker's result with torch's reducers, which send every tensor
  through its own shared-memory file descriptor (a socket round trip each): about 6,000 per
  chunk of 2,000 molecules. Plain :mod:`pickle` bytes avoid that.
* Plain pickle of the molecules' :class:`~gem_core.data.instances.Instance` objects still
  rebuilds three tensors per molecule on the receiving side (0.12 ms a molecule on one core, as
  long as the parsing itself). Here each tensor field of the chunk travels as one numpy array,
  and the receiver cuts it back into per-molecule views.

The instances that come out equal those that went in, field for field, so a screen gives the same
bytes whichever process parsed its molecules.
"""

from __future__ import annotations

import pickle
from dataclasses import fields, replace
from typing import Any

__all__ = ["pack_molecules", "unpack_molecules"]

#: Instance fields sent as one array per chunk, with the dimension they are joined along.
_JOINED = {"x": 0, "pairs": 1, "edge_attr": 0}


def pack_molecules(columns: dict[str, list[Any]], parsed: list[tuple[int, Any]]) -> bytes:
    """A parsed chunk's ``columns`` and ``parsed`` molecules ``(position, MoleculeInstance)``
    as bytes."""
    import torch

    from gem_core.data.instances import Instance

    molecules = [mol for _, mol in parsed]
    instances = [mol.instance for mol in molecules]
    joined: dict[str, Any] = {}
    for name, dim in _JOINED.items():
        values = [getattr(inst, name) for inst in instances]
        if all(v is None for v in values):
            joined[name] = None
        elif any(v is None for v in values):
            raise ValueError(f"some instances of the chunk have no {name!r}: cannot join it")
        else:
            joined[name] = (torch.cat(values, dim).numpy(), [int(v.size(dim)) for v in values])
    others = [
        {f.name: getattr(inst, f.name) for f in fields(Instance) if f.name not in _JOINED}
        for inst in instances
    ]
    shells = [replace(mol, instance=None) for mol in molecules]
    payload = (columns, [i for i, _ in parsed], shells, others, joined)
    return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_molecules(blob: bytes) -> tuple[dict[str, list[Any]], list[tuple[int, Any]]]:
    """The ``(columns, parsed)`` that :func:`pack_molecules` sent."""
    import torch

    from gem_core.data.instances import Instance

    columns, positions, shells, others, joined = pickle.loads(blob)
    parts: dict[str, list[Any]] = {}
    for name, dim in _JOINED.items():
        if joined[name] is None:
            parts[name] = [None] * len(shells)
        else:
            array, sizes = joined[name]
            parts[name] = list(torch.from_numpy(array).split(sizes, dim))
    parsed = []
    for k, (i, shell) in enumerate(zip(positions, shells)):
        instance = Instance(**others[k], **{name: parts[name][k] for name in _JOINED})
        parsed.append((i, replace(shell, instance=instance)))
    return columns, parsed
