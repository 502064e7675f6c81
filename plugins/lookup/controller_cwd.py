"""The directory ansible-playbook runs in, on the controller; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
name: controller_cwd
author: vllm-ops maintainers (!UNKNOWN)
short_description: The directory ansible-playbook runs in, on the controller
description:
  - The controller's working directory - where a relative path given on the command line (a prompts file, a
    recording to replay) is found, and under which the jobs keep their artifacts by default (C(./artifacts)).
  - The same from a checkout and from an installed collection, where the playbook's own directory is inside
    the collection (replaced at its next install); C(PWD) is not used, since a process started with another
    working directory inherits its parent's.
options: {}
"""

EXAMPLES = r"""
- name: Keep the artifacts where the operator runs the playbooks
  ansible.builtin.set_fact:
    vllm_job_artifacts_dir: "{{ lookup('vllm_ops.serving.controller_cwd') }}/artifacts"
"""

RETURN = r"""
_raw:
  description: One item, the directory's absolute path.
  type: list
  elements: path
"""

import os

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [os.getcwd()]
