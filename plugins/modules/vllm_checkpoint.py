#!/usr/bin/python
"""Read a model checkpoint's safetensors headers and config.json on the host; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_checkpoint
short_description: The bytes of a model checkpoint by part, from its safetensors headers
description:
  - Reads C(config.json) and, of every safetensors file of O(path) (those that
    C(model.safetensors.index.json) names, else every C(*.safetensors)), only the 8-byte header
    length and the JSON header, never the tensors.
  - Returns the bytes of every tensor as stored (packed INT4 weights and their scales as the tensors
    they are), summed by part of the model a decode step reads - always-read weights, shared experts,
    routed experts (per MoE layer), the embedding, the LM head, and what a text decode step does not
    run (a vision tower, layers past C(num_hidden_layers)) - with what C(config.json) says of the experts
    and of the KV cache per token. The figures are defined in the collection's C(plugins/module_utils/checkpoint.py),
    the one implementation the controller shares (it reads it as C(vllm_ops_host.checkpoint)).
  - A path that is no local checkpoint (a model given by name), or a file that cannot be read, is not a
    failure - the record then holds only C(path) and C(error), and the module warns.
  - Reads only; reports C(changed=false) and supports check mode.
options:
  path:
    description: The model directory on the host (the vllm role's C(vllm_model_path)).
    type: path
    required: true
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the checkpoint's headers
  vllm_checkpoint:
    path: /srv/models/Kimi-K2.5
  register: checkpoint
"""

RETURN = r"""
checkpoint:
  description:
    - The checkpoint's record (schema 1, tool C(vllm_ops.checkpoint)) - files, tensors, bytes, dtypes, parts,
      rules, unclassified, routed_experts, embedding, lm_head, model, warnings - or, when it could not be
      read, only schema, tool, path and error.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.checkpoint import (
    CheckpointError,
    read_checkpoint,
    unreadable,
)


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type="path", required=True)), supports_check_mode=True)
    path = module.params["path"]
    try:
        record = read_checkpoint(path)
    except CheckpointError as exc:
        record = unreadable(path, str(exc))
        module.warn("no checkpoint figures: %s" % exc)
    module.exit_json(changed=False, checkpoint=record)


if __name__ == "__main__":
    main()
