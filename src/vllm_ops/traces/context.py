"""What the advisor knows of the hardware and the engine: what the caller gave (``context``), else what
the traces say (the GPU's name, the world size, whether CUDA graphs ran), each with where it came from
(``sources``); a tensor-parallel size that cannot hold beside the traces' world size refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import TraceInputError
from .notes import Note, note
from .steps import measured

if TYPE_CHECKING:
    from .run import Run

__all__ = ["analyze"]


def analyze(run: Run) -> tuple[dict, list[Note]]:
    """The summary's ``context`` (``interconnect``, ``gpu``, ``tensor_parallel_size``, ``cuda_graphs``,
    ``sources``, ``engine``, ``api``), and a note where the size given differs from the traces'."""
    given, ranks = run.resolved.context, run.ranks
    devices = sorted({r["device"] for r in ranks if r.get("device")})
    launches = sum(r["graph_launches"] for r in ranks)
    ctx = {
        "interconnect": given.get("interconnect"),
        "gpu": given.get("gpu") or (", ".join(devices) if devices else None),
        "tensor_parallel_size": given.get("tensor_parallel_size") or max(
            (r["world_size"] for r in ranks if r["world_size"]), default=None),
        "cuda_graphs": given.get("cuda_graphs") if given.get("cuda_graphs") is not None else (
            (launches > 0) if any(measured(r) for r in ranks) else None),
    }
    ctx["sources"] = {k: ("given" if given.get(k) is not None else "traces" if v is not None else None)
                      for k, v in ctx.items()}
    ctx.update(engine=run.engine, api=run.api)
    return ctx, _check_tp(given.get("tensor_parallel_size"), run.world)


def _check_tp(given: object, world: int | None) -> list[Note]:
    """A tensor-parallel size given beside the traces' world size: refused where it cannot hold
    (larger than the world size, or not dividing it), said where it differs (pipeline or data
    parallel ranks make the world larger than the group)."""
    if given is None or world is None:
        return []
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise TraceInputError(f"tensor_parallel_size must be a positive integer, got {given!r}")
    if given > world or world % given:
        raise TraceInputError(f"tensor_parallel_size {given} contradicts the traces: their distributedInfo gives a "
                              f"world size of {world}, which a tensor-parallel group of {given} cannot fill; give "
                              "the server's own size, or none (the traces' world size is then used)")
    return [note("tp_differs", given=given, world=world)] if given != world else []
