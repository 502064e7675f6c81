"""Did a set of decode steps run in CUDA graphs: eager steps against graph steps, from evidence.

vLLM replays a decode step from a CUDA graph when its batch size is one it captured, and runs it
eagerly otherwise (a batch above the largest capture size, a shape the graphs do not cover). A
regime of eager steps among graph steps (:mod:`.regimes`) is slower because its kernels are
launched one by one, not because the host is contended: the advice is the capture sizes.

Definitions (per rank, over its step rows; the launches are :mod:`.timeline`'s
``graph_launches``, CUDA/HIP graph launches made inside the step):

* ``graph_steps``: the steps with at least one graph launch; ``launches_per_step``: the mean
  launches a step.
* ``mode``: ``graphs`` when every step launched one, ``eager`` when none did, ``mixed`` otherwise;
  null where the rank's trace holds no launch calls at all (nothing to tell from).
* :func:`contrast` of a regime's steps with the steady ones: ``cause`` ``eager`` where the regime
  ran eager and the steady steps in graphs ("these steps ran without CUDA graphs"), ``graphs``
  for the reverse, else null; with both modes, both launch rates and the regime's batch sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def mode(steps: Sequence[Mapping], launches_seen: bool) -> dict:
    """``{steps, graph_steps, launches_per_step, mode}`` of ``steps`` (see the module docstring)."""
    n = len(steps)
    with_graph = sum(1 for s in steps if (s.get("graph_launches") or 0) > 0)
    out = {"steps": n, "graph_steps": with_graph,
           "launches_per_step": round(sum(s.get("graph_launches") or 0 for s in steps) / n, 3) if n else None,
           "mode": None}
    if launches_seen and n:
        out["mode"] = "graphs" if with_graph == n else "eager" if with_graph == 0 else "mixed"
    return out


def contrast(regime: Sequence[Mapping], steady_steps: Sequence[Mapping], launches_seen: bool) -> dict:
    """How a regime's steps ran against the steady ones (see the module docstring)."""
    a, b = mode(regime, launches_seen), mode(steady_steps, launches_seen)
    cause = ("eager" if (a["mode"], b["mode"]) == ("eager", "graphs") else
             "graphs" if (a["mode"], b["mode"]) == ("graphs", "eager") else None)
    sizes = sorted({s["batch_size"] for s in regime if s.get("batch_size") is not None})
    return {"cause": cause, "regime": a, "steady": b, "batch_sizes": sizes}
