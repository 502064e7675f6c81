"""The interconnect between a host's GPUs, from ``nvidia-smi topo -m``.

The matrix gives, for each pair of GPUs, ``NV<n>`` (n NVLink links), or a PCIe path:
``PIX`` (one PCIe switch), ``PXB`` (several switches), ``PHB`` (through a host bridge),
``NODE`` (across host bridges of one NUMA node) or ``SYS`` (across NUMA nodes, over the
SMP interconnect). ``interconnect`` is ``nvlink`` when every pair is NVLink-connected,
``pcie`` when none is, ``mixed`` otherwise, and None when the text holds no GPU matrix
(no ``nvidia-smi``, no GPU, an error message).
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^GPU\d+$")
PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS")


def parse_topology(text: str | None) -> dict:
    """``{interconnect, gpus, links: {"GPU0-GPU1": "NV18", ...}}`` from ``nvidia-smi topo -m``."""
    out = {"interconnect": None, "gpus": 0, "links": {}}
    if not isinstance(text, str):
        return out
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    header, start = None, 0
    for i, line in enumerate(lines):  # the header row: GPU names, not starting with one
        cells = line.split()
        if cells and not _GPU.match(cells[0]) and any(_GPU.match(c) for c in cells):
            header, start = [c for c in cells if _GPU.match(c)], i + 1
            break
        if cells and _GPU.match(cells[0]) and line[0].isspace():
            header, start = [c for c in cells if _GPU.match(c)], i + 1
            break
    if not header:
        return out
    links = {}
    for line in lines[start:]:
        cells = line.split()
        if not cells or not _GPU.match(cells[0]):
            continue
        row = cells[0]
        for col, value in zip(header, cells[1:1 + len(header)], strict=False):
            if col != row and value != "X":
                links["-".join(sorted((row, col), key=lambda g: int(g[3:])))] = value
    out["gpus"] = len(header)
    out["links"] = dict(sorted(links.items()))
    kinds = {"nvlink" if v.startswith("NV") else "pcie" if v in PCIE else "other" for v in links.values()}
    if kinds == {"nvlink"}:
        out["interconnect"] = "nvlink"
    elif kinds == {"pcie"}:
        out["interconnect"] = "pcie"
    elif kinds:
        out["interconnect"] = "mixed"
    return out
