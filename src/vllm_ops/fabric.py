"""The GPUs' PCIe links and peer-to-peer matrix, as nvidia-smi reports them: read, put on ranks, judged.

On a PCIe host a GPU whose link trained narrower or slower than it can (x16 to x4, Gen5 to Gen1)
divides the all-reduce bandwidth of every rank, and nothing else says so. Two readings come here:

- the capture's, ``capture.json``'s ``fabric`` record (:func:`assess`), read by the module that sends
  the profiled requests (``plugins/module_utils/vllm_fabric_lib.py``, ``vllm_ops_host`` here, whose
  table of nvidia-smi's fields this module parses with too) while they run, one reading per GPU
  kept: the one with its link most up (highest generation, then width, then GPU utilization),
  ``{read, reason, during, interval_s, samples, failed_samples, query, gpus, compute_apps, p2p_read,
  errors}``;
- the deploy preflight's, the text of ``nvidia-smi --query-gpu=index,pci.bus_id,
  pcie.link.width.current,pcie.link.width.max --format=csv,noheader,nounits`` as Ansible's
  ``command`` registers it (:func:`preflight`).

A GPU's reading (one definition, used by both): ``index``, ``bus_id`` (``pci.bus_id``), ``uuid``,
``gen_current`` (``pcie.link.gen.gpucurrent``, or the deprecated ``pcie.link.gen.current`` of older
drivers), ``gen_max`` (``pcie.link.gen.max``: the highest generation both the GPU and its slot
support), ``gen_gpu_max`` and ``gen_host_max`` (``pcie.link.gen.gpumax``/``hostmax``, newer drivers
only), ``width_current`` and ``width_max`` (``pcie.link.width.current``/``max``, lanes) and
``utilization_pct`` (``utilization.gpu`` of the same reading). A value nvidia-smi does not give
(``[N/A]``, ``[Not Supported]``) is None, and what is None is not judged.

Figures:

- **width degraded**: ``width_current < width_max``. Judged on every reading. NVIDIA documents that
  the current width, like the generation, "may be reduced when the GPU is not in use"; a width warning
  read on idle GPUs (the deploy preflight) is confirmed by a campaign, which reads under load.
- **generation degraded**: ``gen_current < gen_max`` on a reading whose ``utilization_pct`` is at
  least :data:`BUSY_UTILIZATION_PCT`: the generation drops while a GPU idles, so an idle reading (or
  one whose utilization is unknown) is no evidence and the generation is not judged then.
- **bandwidth share**: the link's bandwidth per direction over its maximum's,
  ``LANE_GBPS[gen_current] * width_current / (LANE_GBPS[gen_max] * width_max)`` when the generation is
  judged (None for a generation outside :data:`LANE_GBPS`), else ``width_current / width_max`` (the
  width only).
- **peer-to-peer unavailable**: two of the service's GPUs whose status in the read matrix
  (``nvidia-smi topo -p2p r``) is not ``OK``; NCCL then moves their data through host memory.

Ranks: vLLM's worker ``VLLM::Worker_TP<r>`` runs on CUDA device r of its process. Which GPU that is
(:func:`rank_map`) is, in this order: **observed**, the GPU on which the worker titled
``..._TP<r>`` (``VLLM::Worker`` at TP 1) holds the most memory (``nvidia-smi --query-compute-apps``,
read with the links; a worker may hold a little on its peers' GPUs too); else the r-th entry of
``CUDA_VISIBLE_DEVICES`` in the service's environment (a UUID, matched, or an index, taken in PCI bus
order, which is exact with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and assumed otherwise); else the r-th GPU
in PCI bus order (nvidia-smi's index order), an assumption: CUDA's default order is fastest first,
which is PCI bus order on identical GPUs. ``basis`` says which, and each GPU keeps its bus id so the
mapping can be checked against the trace (a trace's ``deviceProperties`` and ``distributedInfo``
carry no bus id; its CPU process id is the worker's, which the observed mapping records as ``pid``).

Findings are data, as the verdict's are: ``{kind, rank, gpu, bus_id, evidence: {...}, thresholds:
{...}, next: [...]}`` (:func:`findings`), put in words at the edge (:func:`describe`).

For the verdict and the report: ``campaign.inputs.load_capture`` passes ``capture.json``'s
``fabric`` through; the report command (``campaign.report.pcie``) calls ``found =
findings(assess(capture))`` once and gives ``found`` to the summarizer (``summarize(...,
fabric=found)``), which adds ``describe(f)`` of each to the summary's warnings (so the headline's
warning count and the report's warnings name the GPU, bus id and rank) and to the verdict
(:mod:`vllm_ops.traces.verdict`: evidence ``pcie_link``, and ``advice_for_rank(found, r)`` first for
an imbalanced or host-bound rank r); ``campaign.json`` keeps ``fabric`` (the :func:`assess` result
and its findings) and the report a table of its ``links``. Not made yet: the check that the trace's
CPU process id of rank r equals ``rank_map``'s ``pid`` when the ranks were observed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from vllm_ops_host.vllm_fabric_lib import FIELD_KEYS, field_value

from .errors import VllmOpsError

__all__ = ["BUSY_UTILIZATION_PCT", "FIELD_KEYS", "LANE_GBPS", "PREFLIGHT_FIELDS", "PREFLIGHT_MODES",
           "FabricInputError", "advice_for_rank", "assess", "describe", "findings", "judge_link", "parse_link_csv",
           "parse_p2p", "preflight", "preflight_mode", "rank_map", "warnings"]

# A reading whose GPU utilization is below this (percent) is idle: its generation is no evidence.
BUSY_UTILIZATION_PCT = 1
# GB/s per lane and direction after line encoding: Gen1/2 8b/10b, Gen3 on 128b/130b.
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938}
# What the deploy preflight asks: widths only (the GPUs idle then), fields every driver has.
PREFLIGHT_FIELDS = ("index", "pci.bus_id", "pcie.link.width.current", "pcie.link.width.max")
P2P_MEANING = {"OK": "status OK", "CNS": "chipset not supported", "GNS": "GPU not supported",
               "TNS": "topology not supported", "NS": "not supported", "DR": "disabled by regkey",
               "U": "unknown"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_WORKER = re.compile(r"Worker(?:_[A-Z]+\d+)*?(?:_TP(\d+))?$")


class FabricInputError(VllmOpsError):
    """A fabric record or an nvidia-smi reading that cannot be read; the message names the field."""


def parse_link_csv(text: str | None, fields: Sequence[str]) -> list[dict]:
    """One reading per GPU from ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``."""
    if not isinstance(text, str):
        raise FabricInputError(f"nvidia-smi output: expected text, got {type(text).__name__}")
    unknown = [f for f in fields if f not in FIELD_KEYS]
    if unknown:
        raise FabricInputError(f"fields {unknown}: not link fields this module reads ({sorted(FIELD_KEYS)})")
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise FabricInputError(f"nvidia-smi line {line!r}: {len(cells)} values for {len(fields)} fields")
        row = {FIELD_KEYS[f]: field_value(FIELD_KEYS[f], c) for f, c in zip(fields, cells, strict=True)}
        if row.get("index") is None:
            raise FabricInputError(f"nvidia-smi line {line!r}: no GPU index")
        rows.append(row)
    return sorted(rows, key=lambda r: r["index"])


def parse_p2p(text: str | None) -> dict:
    """``{read, gpus, pairs: {"0-1": "OK", ...}}`` from ``nvidia-smi topo -p2p r``; ``read`` is False
    (and the rest empty) when the text holds no matrix (no nvidia-smi, an error message)."""
    out = {"read": False, "gpus": [], "pairs": {}}
    if not isinstance(text, str):
        return out
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header = None
    for line in lines:
        cells = line.split()
        if not cells:
            continue
        if header is None:
            if all(_GPU.match(c) for c in cells) and not line[:1].isalnum():
                header = [int(_GPU.match(c).group(1)) for c in cells]
            continue
        row = _GPU.match(cells[0])
        if not row:
            break  # the legend
        me = int(row.group(1))
        for col, status in zip(header, cells[1:], strict=False):
            if col != me:
                out["pairs"]["-".join(str(g) for g in sorted((me, col)))] = status
    if header:
        out.update(read=True, gpus=header, pairs=dict(sorted(out["pairs"].items(),
                                                             key=lambda kv: [int(g) for g in kv[0].split("-")])))
    return out


def judge_link(gpu: Mapping, judge_generation: bool = True) -> dict:
    """``{degraded: ["width", "generation"], generation_judged, bandwidth_share}`` of one reading."""
    width, width_max = gpu.get("width_current"), gpu.get("width_max")
    gen, gen_max = gpu.get("gen_current"), gpu.get("gen_max")
    util = gpu.get("utilization_pct")
    degraded = []
    if isinstance(width, int) and isinstance(width_max, int) and width < width_max:
        degraded.append("width")
    gen_judged = bool(judge_generation and isinstance(gen, int) and isinstance(gen_max, int)
                      and isinstance(util, int) and util >= BUSY_UTILIZATION_PCT)
    if gen_judged and gen < gen_max:
        degraded.append("generation")
    share = None
    if isinstance(width, int) and isinstance(width_max, int) and width_max > 0:
        if not gen_judged:
            share = round(width / width_max, 4)
        elif gen in LANE_GBPS and gen_max in LANE_GBPS:
            share = round(LANE_GBPS[gen] * width / (LANE_GBPS[gen_max] * width_max), 4)
    return {"degraded": degraded, "generation_judged": gen_judged, "bandwidth_share": share}


def _workers(compute_apps: Sequence[Mapping], by_bus: Mapping[str, int]) -> dict[int, dict]:
    """``{rank: {gpu, pid}}`` of the workers nvidia-smi lists, each on the GPU it holds most memory on;
    a rank claimed by two processes is left out (ambiguous)."""
    best: dict[int, dict] = {}
    seen: dict[int, set] = {}
    for app in compute_apps:
        name = str(app.get("process_name") or "")
        match = _WORKER.search(name)
        gpu = by_bus.get(str(app.get("bus_id") or "").upper())
        if not match or gpu is None:
            continue
        rank = int(match.group(1)) if match.group(1) else 0
        seen.setdefault(rank, set()).add(app.get("pid"))
        mib = app.get("used_mib") if isinstance(app.get("used_mib"), int) else -1
        if rank not in best or (best[rank]["pid"] == app.get("pid") and mib > best[rank]["mib"]):
            best[rank] = {"gpu": gpu, "pid": app.get("pid"), "mib": mib}
    return {r: {"gpu": b["gpu"], "pid": b["pid"]} for r, b in best.items() if len(seen[r]) == 1}


def rank_map(tensor_parallel_size: int, environment: Mapping | None, gpus: Sequence[Mapping],
             compute_apps: Sequence[Mapping] | None = None) -> dict:
    """``{basis, ranks: {rank: {gpu, bus_id, pid}}}``: which GPU each TP rank runs on, and why we think so
    (see the module's docstring). A rank that cannot be placed is left out."""
    tp = int(tensor_parallel_size)
    env = {str(k): str(v) for k, v in (environment or {}).items() if v is not None}
    ordered = sorted(gpus, key=lambda g: g["index"])
    by_index = {g["index"]: g for g in ordered}
    by_bus = {str(g.get("bus_id") or "").upper(): g["index"] for g in ordered if g.get("bus_id")}

    def placed(ranks: Mapping[int, Mapping]) -> dict:
        return {r: {"gpu": p["gpu"], "bus_id": by_index[p["gpu"]].get("bus_id"), "pid": p.get("pid")}
                for r, p in sorted(ranks.items())}

    observed = _workers(compute_apps or [], by_bus)
    if tp > 0 and set(range(tp)) <= set(observed):
        return {"basis": "observed: the GPU each worker VLLM::Worker_TP<r> holds the most memory on "
                         "(nvidia-smi --query-compute-apps, read with the links)",
                "ranks": placed({r: observed[r] for r in range(tp)})}
    order = env.get("CUDA_DEVICE_ORDER", "")
    in_bus_order = ("in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)" if order == "PCI_BUS_ID" else
                    "indexes assumed in PCI bus order (CUDA's default order, fastest first, is the same on "
                    "identical GPUs)")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        ranks = {}
        for rank, entry in enumerate(entries[:tp]):
            if entry.isdigit() and int(entry) < len(ordered):
                ranks[rank] = {"gpu": ordered[int(entry)]["index"]}
            elif entry.startswith("GPU-"):
                hits = [g["index"] for g in ordered if str(g.get("uuid") or "").startswith(entry)]
                if len(hits) == 1:
                    ranks[rank] = {"gpu": hits[0]}
        return {"basis": f"CUDA_VISIBLE_DEVICES={visible} of the service's environment, {in_bus_order}",
                "ranks": placed(ranks)}
    ranks = {r: {"gpu": ordered[r]["index"]} for r in range(min(tp, len(ordered)))}
    return {"basis": "assumed: rank r on the r-th GPU in PCI bus order (no CUDA_VISIBLE_DEVICES; CUDA's "
                     "default order, fastest first, is PCI bus order on identical GPUs)",
            "ranks": placed(ranks)}


def _rank_of(mapping: Mapping) -> dict[int, int]:
    return {p["gpu"]: int(r) for r, p in mapping["ranks"].items()}


def _links(gpus: Sequence[Mapping], mapping: Mapping, judge_generation: bool) -> list[dict]:
    ranks = _rank_of(mapping)
    return [{**dict(g), "rank": ranks.get(g["index"]), **judge_link(g, judge_generation)}
            for g in sorted(gpus, key=lambda g: g["index"])]


def _p2p(text: str | None, ranks: Mapping[int, int]) -> dict:
    matrix = parse_p2p(text)
    used = set(ranks) if ranks else set(matrix["gpus"])
    unavailable = []
    for pair, status in matrix["pairs"].items():
        a, b = (int(g) for g in pair.split("-"))
        if status != "OK" and a in used and b in used:
            unavailable.append({"gpus": [a, b], "ranks": [ranks.get(a), ranks.get(b)], "status": status,
                                "meaning": P2P_MEANING.get(status, "not OK")})
    return {**matrix, "unavailable": unavailable}


def assess(capture: Mapping) -> dict:
    """What the capture's ``fabric`` record says: ``{checked, reason, during, samples, rank_basis, links:
    [reading + rank + judge_link], degraded: [those links with a degraded figure], p2p: {read, gpus,
    pairs, unavailable: [{gpus, ranks, status, meaning}]}}``. A capture without the record (before
    this reading existed) or whose record says it was not read is ``checked: False`` with the reason."""
    if not isinstance(capture, Mapping):
        raise FabricInputError(f"capture: expected a mapping, got {type(capture).__name__}")
    record = capture.get("fabric")
    empty = {"checked": False, "reason": None, "during": None, "samples": 0, "rank_basis": None, "links": [],
             "degraded": [], "p2p": {"read": False, "gpus": [], "pairs": {}, "unavailable": []}}
    if record is None:
        return {**empty, "reason": "the capture did not read the PCIe links (a capture before this release)"}
    if not isinstance(record, Mapping):
        raise FabricInputError(f"capture.json 'fabric': expected a mapping, got {type(record).__name__}")
    if not record.get("read"):
        return {**empty, "reason": str(record.get("reason") or "not read")}
    gpus = record.get("gpus")
    if not isinstance(gpus, list) or not all(isinstance(g, Mapping) and isinstance(g.get("index"), int)
                                             for g in gpus):
        raise FabricInputError("capture.json 'fabric.gpus': expected a list of readings with an integer 'index'")
    tp = capture.get("tensor_parallel_size")
    try:
        tp = int(tp)
    except (TypeError, ValueError):
        raise FabricInputError(f"capture.json 'tensor_parallel_size': {tp!r} is not an integer") from None
    mapping = rank_map(tp, capture.get("environment"), gpus, record.get("compute_apps") or [])
    links = _links(gpus, mapping, judge_generation=True)
    return {"checked": True, "reason": None, "during": record.get("during"), "samples": record.get("samples", 0),
            "rank_basis": mapping["basis"], "links": links, "degraded": [x for x in links if x["degraded"]],
            "p2p": _p2p(record.get("p2p_read"), _rank_of(mapping))}


def _lspci(bus_id: str | None) -> str:
    match = re.fullmatch(r"[0-9A-Fa-f]*?([0-9A-Fa-f]{1,4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.(\d)", bus_id or "")
    if not match:
        return "lspci -vvv (its LnkSta against LnkCap)"
    domain, bus, dev, fn = match.groups()
    return f"lspci -vvv -s {int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{fn} (LnkSta against LnkCap)"


def findings(assessment: Mapping) -> list[dict]:
    """The verdict's warnings from an :func:`assess` (or :func:`preflight`) result, one per degraded link
    (``kind: pcie-link-degraded``) and one per unavailable peer-to-peer pair (``kind: p2p-unavailable``)."""
    out = []
    for link in assessment.get("degraded", []):
        gpu, bus = link["index"], link.get("bus_id")
        out.append({
            "kind": "pcie-link-degraded", "rank": link.get("rank"), "gpu": gpu, "bus_id": bus,
            "evidence": {key: link.get(key) for key in ("width_current", "width_max", "gen_current", "gen_max",
                                                        "utilization_pct", "bandwidth_share")}
            | {"degraded": list(link["degraded"]), "generation_judged": link["generation_judged"],
               "read_during": assessment.get("during"), "rank_basis": assessment.get("rank_basis")},
            "thresholds": {"width": "below width_max",
                           "generation": f"below gen_max, read at >= {BUSY_UTILIZATION_PCT}% GPU utilization"},
            "next": [f"check GPU {gpu}'s link: nvidia-smi -q -i {gpu} (GPU Link Info), {_lspci(bus)}; reseat the "
                     "GPU or its riser or cable, and check the slot's link settings in the BIOS",
                     "measure what it costs: the all-reduce floor (playbooks/allreduce_bench.yml) before and "
                     "after the fix"],
        })
    for pair in assessment.get("p2p", {}).get("unavailable", []):
        a, b = pair["gpus"]
        out.append({
            "kind": "p2p-unavailable", "rank": None, "gpu": None, "bus_id": None, "gpus": [a, b],
            "ranks": pair["ranks"],
            "evidence": {"status": pair["status"], "meaning": pair["meaning"], "matrix": "nvidia-smi topo -p2p r"},
            "thresholds": {"status": "OK"},
            "next": ["check the host's IOMMU and PCIe ACS settings (ACS on a switch's ports sends peer traffic "
                     "through the root complex) and the driver's peer-to-peer support",
                     "compare the all-reduce floor with NCCL_P2P_DISABLE=1 to see what peer-to-peer is worth here"],
        })
    return out


def describe(finding: Mapping) -> str:
    """One finding in words: ``PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16, Gen5 of Gen5
    (25% of its bandwidth), read during the profiled requests``."""
    if finding.get("kind") == "p2p-unavailable":
        a, b = finding["gpus"]
        ranks = finding.get("ranks") or [None, None]
        on = f" (ranks {ranks[0]} and {ranks[1]})" if None not in ranks else ""
        ev = finding["evidence"]
        return f"peer-to-peer read between GPU {a} and GPU {b}{on}: {ev['status']} ({ev['meaning']})"
    ev = finding["evidence"]
    rank = finding.get("rank")
    on = f"rank {rank}" if rank is not None else "no rank placed on it"
    where = ", ".join(str(x) for x in (finding.get("bus_id"), on) if x)
    width = f"x{ev['width_current']} of x{ev['width_max']}" if ev.get("width_max") is not None else "width unknown"
    if ev.get("generation_judged"):
        gen = f", Gen{ev['gen_current']} of Gen{ev['gen_max']}"
    elif ev.get("gen_max") is not None:
        gen = ", generation not judged (idle reading)"
    else:
        gen = ""
    share = f" ({ev['bandwidth_share']:.0%} of its bandwidth)" if ev.get("bandwidth_share") is not None else ""
    during = f", read {ev['read_during']}" if ev.get("read_during") else ""
    return f"PCIe link of GPU {finding['gpu']} ({where}) at {width}{gen}{share}{during}"


def warnings(capture: Mapping) -> list[str]:
    """The capture's fabric findings in words (:func:`describe` of :func:`findings` of :func:`assess`)."""
    return [describe(f) for f in findings(assess(capture))]


def advice_for_rank(found: Sequence[Mapping], rank: int | None) -> list[str]:
    """The next experiments of the degraded link on ``rank``, if any: what the verdict's advice for an
    imbalanced (or host-bound) rank puts first instead of "check its PCIe link" in words only."""
    return [step for f in found if f.get("kind") == "pcie-link-degraded" and rank is not None
            and f.get("rank") == rank for step in f["next"][:1]]


PREFLIGHT_MODES = ("warn", "error", "off")


def preflight_mode(mode: object) -> str | None:
    """``vllm_pcie_link_check`` as one of :data:`PREFLIGHT_MODES`, or None for a value that is none of them;
    YAML's bare ``off`` arrives as False and means off."""
    if mode is False:
        return "off"
    text = str(mode).strip().lower() if isinstance(mode, str) else None
    return text if text in PREFLIGHT_MODES else None


def preflight(result: Mapping, mode: object = "warn", tensor_parallel_size: int = 0,
              environment: Mapping | None = None) -> dict:
    """The deploy preflight's judgement of ``nvidia-smi --query-gpu=`` :data:`PREFLIGHT_FIELDS` as Ansible's
    ``command`` registers it, under ``mode`` (``vllm_pcie_link_check``): ``{mode, mode_error, checked, reason,
    during, rank_basis, links, degraded, p2p, messages, warn, refuse}``. Widths only (the GPUs idle at deploy).
    No nvidia-smi, no GPU, any failure of the tool or a skipped task is ``checked: False`` with the reason, never
    an error; ``warn`` and ``refuse`` say what the preflight does with degraded links in that mode."""
    if not isinstance(result, Mapping):
        raise FabricInputError(f"the nvidia-smi task's result: expected a mapping, got {type(result).__name__}")
    normal = preflight_mode(mode)
    base = {"mode": normal, "mode_error": None, "checked": False, "reason": None,
            "during": "at deploy, GPUs idle: the width only is judged", "rank_basis": None, "links": [],
            "degraded": [], "p2p": {"read": False, "unavailable": []}, "messages": [], "warn": False,
            "refuse": False}
    if normal is None:
        return {**base, "mode_error": f"vllm_pcie_link_check is {mode!r}: allowed values are warn, error and off.",
                "reason": "vllm_pcie_link_check has no valid value"}
    if normal == "off" or result.get("skipped"):
        return {**base, "reason": "the check is off (vllm_pcie_link_check: off)"}
    rc = result.get("rc")
    if rc != 0:
        said = " ".join(str(result.get(k) or "").strip() for k in ("stdout", "stderr", "msg")).strip()
        msg = str(result.get("msg") or "")
        # ansible-core 2.19 says only "Error executing command." when the executable cannot be started;
        # earlier releases add the OSError ("[Errno 2] No such file or directory: b'nvidia-smi'").
        if "No such file or directory" in msg:
            why = "nvidia-smi not found on the host"
        elif msg.startswith("Error executing command") or "[Errno" in msg:
            why = f"nvidia-smi could not be run on the host (not found, or not executable): {msg}"
        else:
            why = f"nvidia-smi failed (exit {rc}): {said.splitlines()[0] if said else 'no output'}"
        return {**base, "reason": why}
    try:
        gpus = parse_link_csv(result.get("stdout") or "", PREFLIGHT_FIELDS)
    except FabricInputError as exc:
        return {**base, "reason": f"nvidia-smi's answer could not be read: {exc}"}
    if not gpus:
        return {**base, "reason": "nvidia-smi listed no GPU"}
    mapping = rank_map(int(tensor_parallel_size or 0), environment, gpus)
    links = _links(gpus, mapping, judge_generation=False)
    out = {**base, "checked": True, "rank_basis": mapping["basis"], "links": links,
           "degraded": [x for x in links if x["degraded"]]}
    out["messages"] = [describe(f) for f in findings(out)]
    out["warn"] = bool(out["degraded"]) and normal == "warn"
    out["refuse"] = bool(out["degraded"]) and normal == "error"
    return out
